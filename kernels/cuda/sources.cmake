# CUDA variants, compiled into gpucompute_kernels. One file per variant family.
target_sources(gpucompute_kernels PRIVATE
  cuda/register_cuda.cc
  cuda/cuda_util.cc
  cuda/cuda_timer.cc
  cuda/matmul/naive.cu
  cuda/matmul/tiled.cu
  cuda/matmul/register_tiled.cu
  cuda/matmul/cublas.cc
  cuda/transpose/transpose.cu
  cuda/transpose/cublas.cc
  cuda/reduce/tree.cu
  cuda/reduce/warp_shuffle.cu
  cuda/reduce/cub.cu
)
target_link_libraries(gpucompute_kernels PUBLIC CUDA::cudart CUDA::cublas)
target_compile_options(gpucompute_kernels PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr -lineinfo>)
