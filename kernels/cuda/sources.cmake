# CUDA variants, compiled into gpucompute_kernels: every .cu and .cc under
# cuda/ (kernel files, each op's ladder.cc, the shared helpers).
file(GLOB_RECURSE _cuda_sources CONFIGURE_DEPENDS
  ${CMAKE_CURRENT_SOURCE_DIR}/cuda/*.cu ${CMAKE_CURRENT_SOURCE_DIR}/cuda/*.cc)
target_sources(gpucompute_kernels PRIVATE ${_cuda_sources})
target_link_libraries(gpucompute_kernels PUBLIC CUDA::cudart CUDA::cublas CUDA::cublasLt)
target_compile_options(gpucompute_kernels PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)
