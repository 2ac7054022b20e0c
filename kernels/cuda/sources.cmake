# CUDA variants, compiled into gpucompute_kernels. One file per variant family.
target_sources(gpucompute_kernels PRIVATE
  cuda/register_cuda.cc
  cuda/matmul/naive.cu
)
target_link_libraries(gpucompute_kernels PUBLIC CUDA::cudart CUDA::cublas)
target_compile_options(gpucompute_kernels PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)
