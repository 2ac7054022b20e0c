# CUDA variants, compiled into gpucompute_kernels: every .cu and .cc under
# cuda/ (kernel files, each op's ladder.cc, the shared helpers).
file(GLOB_RECURSE _cuda_sources CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/*.cu ${CMAKE_CURRENT_SOURCE_DIR}/cuda/*.cc)
# Kernels with Hopper-only instructions (wgmma, setmaxnreg) need sm_90a code,
# which no CMAKE_CUDA_ARCHITECTURES value of CMake 3.25 names: they build
# apart, for sm_90a alone, and their ladder rows are listed on compute
# capability 9.0 devices only (LadderRow::requires_sm90a).
set(_sm90a_sources ${CMAKE_CURRENT_SOURCE_DIR}/cuda/matmul/wgmma.cu)
list(REMOVE_ITEM _cuda_sources ${_sm90a_sources})
target_sources(gpucompute_kernels PRIVATE ${_cuda_sources})
target_link_libraries(gpucompute_kernels PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt)
target_compile_options(gpucompute_kernels PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)

add_library(gpucompute_kernels_sm90a OBJECT ${_sm90a_sources})
set_target_properties(gpucompute_kernels_sm90a PROPERTIES CUDA_ARCHITECTURES OFF)
target_include_directories(gpucompute_kernels_sm90a PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR})
target_link_libraries(gpucompute_kernels_sm90a PRIVATE CUDA::cudart)
target_compile_options(gpucompute_kernels_sm90a PRIVATE
  --expt-relaxed-constexpr -lineinfo -gencode arch=compute_90a,code=sm_90a)
target_sources(gpucompute_kernels PRIVATE $<TARGET_OBJECTS:gpucompute_kernels_sm90a>)
