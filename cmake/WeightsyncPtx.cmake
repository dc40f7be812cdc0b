# SPDX-FileCopyrightText: 2026 weightsync contributors
# SPDX-License-Identifier: Apache-2.0
# The GPU kernels ship as PTX text in headers, weightsync/cuda/detail/<name>_ptx.hpp, so that a
# program that includes the CUDA headers compiles with any C++ compiler (no nvcc) and loads its
# kernels at run time (the driver JIT-compiles the PTX for the GPU at hand). The headers are not
# kept in git: the build runs nvcc -ptx on kernels/<name>.cu (kernels/embed_ptx.sh, with nvcc's
# dependency file, so a change to the .cu or to a header it includes rebuilds it) and writes them
# under <build>/generated/include, which is a BUILD_INTERFACE include directory of the target;
# `cmake --install` builds them first if needed and installs them beside the other headers.
#   weightsync_ptx_headers(<interface target>)   (needs WEIGHTSYNC_NVCC)
# Each kernel's virtual architecture is the one its PTX needs, whatever CMAKE_CUDA_ARCHITECTURES
# says: compute_75 (the oldest nvcc 13 emits), compute_89 for the FP8 kernels
# (cvt.rn.satfinite.e4m3x2.f32).
set(WEIGHTSYNC_PTX_KERNELS
  "batched_copy kBatchedCopyPtx compute_75"
  "gather kGatherPtx compute_75"
  "delta kDeltaPtx compute_75"
  "digest kDigestPtx compute_75"
  "fp8_quantize kFp8QuantizePtx compute_89")

function(weightsync_ptx_headers target)
  set(gen "${PROJECT_BINARY_DIR}/generated/include")
  set(headers "")
  foreach(spec IN LISTS WEIGHTSYNC_PTX_KERNELS)
    string(REPLACE " " ";" spec "${spec}")
    list(GET spec 0 name)
    list(GET spec 1 symbol)
    list(GET spec 2 arch)
    set(out "${gen}/weightsync/cuda/detail/${name}_ptx.hpp")
    add_custom_command(OUTPUT "${out}"
      COMMAND bash "${PROJECT_SOURCE_DIR}/kernels/embed_ptx.sh" "${WEIGHTSYNC_NVCC}" "${out}"
              "${PROJECT_SOURCE_DIR}/kernels/${name}.cu" "${symbol}" "${arch}" "${out}.d"
      DEPENDS "${PROJECT_SOURCE_DIR}/kernels/${name}.cu" "${PROJECT_SOURCE_DIR}/kernels/embed_ptx.sh"
      DEPFILE "${out}.d"
      COMMENT "nvcc -ptx -arch=${arch} kernels/${name}.cu -> weightsync/cuda/detail/${name}_ptx.hpp"
      VERBATIM)
    list(APPEND headers "${out}")
  endforeach()
  add_custom_target(weightsync_ptx DEPENDS ${headers})
  # (an interface library's dependencies are followed by every target that links it)
  add_dependencies(${target} weightsync_ptx)
  target_sources(${target} INTERFACE FILE_SET HEADERS BASE_DIRS "${gen}" FILES ${headers})
  set(WEIGHTSYNC_PTX_INCLUDE_DIR "${gen}" PARENT_SCOPE)
  if(WEIGHTSYNC_INSTALL)
    # `cmake --install` builds nothing by itself: bring the headers up to date first.
    install(CODE "
      execute_process(COMMAND \"${CMAKE_COMMAND}\" --build \"${PROJECT_BINARY_DIR}\" --target weightsync_ptx
                      RESULT_VARIABLE _ws_rc)
      if(NOT _ws_rc EQUAL 0)
        message(FATAL_ERROR \"weightsync: building the kernels' PTX headers (target weightsync_ptx, nvcc) failed\")
      endif()")
  endif()
endfunction()
