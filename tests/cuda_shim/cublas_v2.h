/* Test-only host stand-in for the subset of cuBLAS (cublas_v2.h) that engine/cuda/engine_cuda.c calls;
 * see tests/cuda_shim/cuda_runtime_api.h. Matrices are column-major with cuBLAS's exact argument
 * semantics: op(A) is m x k, op(B) k x n, C m x n; lda >= max(1, transa == N ? m : k),
 * ldb >= max(1, transb == N ? k : n), ldc >= max(1, m) (else CUBLAS_STATUS_INVALID_VALUE, as the
 * library), and every matrix's last element must lie inside one live device allocation. Only
 * float data with CUBLAS_COMPUTE_32F is implemented (the product's other types refuse with
 * CUBLAS_STATUS_NOT_SUPPORTED). The product links the real libcublas. */
#ifndef CPCU_SHIM_CUBLAS_V2_H
#define CPCU_SHIM_CUBLAS_V2_H

#include "cuda_runtime_api.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15
} cublasStatus_t;

typedef enum { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2 } cublasOperation_t;
typedef enum { CUDA_R_32F = 0, CUDA_R_16F = 2, CUDA_R_16BF = 14 } cudaDataType;
typedef enum { CUBLAS_COMPUTE_32F = 68, CUBLAS_COMPUTE_32F_FAST_TF32 = 77 } cublasComputeType_t;
typedef enum { CUBLAS_GEMM_DEFAULT = -1 } cublasGemmAlgo_t;

typedef struct cublasContext *cublasHandle_t;

cublasStatus_t cublasCreate(cublasHandle_t *h);
cublasStatus_t cublasDestroy(cublasHandle_t h);
cublasStatus_t cublasSetStream(cublasHandle_t h, cudaStream_t s);
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void *alpha, const void *A, cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta, void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo);
const char *cublasGetStatusString(cublasStatus_t s);

/* Number of GEMMs run since the start (test control, not cuBLAS API). */
long cpcu_shim_gemm_calls(void);

#ifdef __cplusplus
}
#endif

#endif
