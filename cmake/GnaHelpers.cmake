# Every layer is an OBJECT library whose objects end up in the one shared library libgna, so
# backends that register themselves at static-initialisation time are always linked in.
function(gna_add_layer name)
  add_library(${name} OBJECT ${ARGN})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC Threads::Threads)
  set_property(GLOBAL APPEND PROPERTY GNA_LAYERS ${name})
endfunction()

# Native code (SASS) the CUDA kernels carry, by compute capability (80 = sm_80). The default
# covers every GPU generation the kernels run on; "90" (or "native": the GPUs of this machine)
# builds faster for one. The Hopper kernels (sm_90a) are built when 90 is in the list.
set(GNA_CUDA_ARCHS "80;86;89;90;100;120" CACHE STRING
    "Compute capabilities with native code, e.g. 80;86;89;90;100;120 (default), 90, or native")

# From GNA_CUDA_ARCHS (after enable_language(CUDA)): GNA_CUDA_ARCH_LIST (sorted numbers),
# GNA_CUDA_PTX_ARCH (the newest, also embedded as PTX so that newer GPUs JIT-compile it),
# GNA_CUDA_HOPPER (90 listed), and the nvcc flags of each kernel family: GNA_CUDA_FLAGS_PORTABLE
# (the sm_80+ kernels: SASS per arch, each from its own virtual arch so that code for newer
# archs, e.g. the portable backward's sm_90 reductions, is compiled in; PTX of the newest) and
# GNA_CUDA_FLAGS_HOPPER (sm_90a only).
function(gna_resolve_cuda_archs)
  set(archs ${GNA_CUDA_ARCHS})
  if(archs STREQUAL "native")
    set(archs "")
    foreach(a ${CMAKE_CUDA_ARCHITECTURES_NATIVE})
      string(REGEX REPLACE "-real$" "" a "${a}")
      list(APPEND archs ${a})
    endforeach()
    if(NOT archs)
      message(FATAL_ERROR "GNA_CUDA_ARCHS=native: no CUDA GPU was found on this machine; "
                          "name the compute capabilities instead (e.g. -DGNA_CUDA_ARCHS=90)")
    endif()
  endif()
  if(NOT archs)
    message(FATAL_ERROR "GNA_CUDA_ARCHS is empty (e.g. 80;86;89;90;100;120, 90 or native)")
  endif()
  foreach(a ${archs})
    if(NOT a MATCHES "^[0-9]+$" OR a LESS 80)
      message(FATAL_ERROR "GNA_CUDA_ARCHS: '${a}' is not a compute capability of 80 or newer "
                          "written as a number (80 = sm_80; the Hopper kernels' sm_90a comes with 90)")
    endif()
  endforeach()
  list(REMOVE_DUPLICATES archs)
  list(SORT archs COMPARE NATURAL)
  list(GET archs -1 ptx)
  set(portable "")
  foreach(a ${archs})
    list(APPEND portable -gencode=arch=compute_${a},code=sm_${a})
  endforeach()
  list(APPEND portable -gencode=arch=compute_${ptx},code=compute_${ptx})
  set(hopper OFF)
  if(90 IN_LIST archs)
    set(hopper ON)
  endif()
  set(GNA_CUDA_ARCH_LIST ${archs} PARENT_SCOPE)
  set(GNA_CUDA_PTX_ARCH ${ptx} PARENT_SCOPE)
  set(GNA_CUDA_HOPPER ${hopper} PARENT_SCOPE)
  set(GNA_CUDA_FLAGS_PORTABLE ${portable} PARENT_SCOPE)
  set(GNA_CUDA_FLAGS_HOPPER -gencode=arch=compute_90a,code=sm_90a PARENT_SCOPE)
  list(JOIN archs ", sm_" names)
  message(STATUS "gna: native code for sm_${names} (PTX: compute_${ptx}), Hopper kernels ${hopper}")
endfunction()
set(GNA_CUDA_COMMON_FLAGS --expt-relaxed-constexpr -lineinfo)

# Adds every immediate subdirectory of `dir` that has a CMakeLists.txt (one per component, so
# components never edit a shared list).
function(gna_add_component_dirs dir)
  file(GLOB children RELATIVE ${dir} ${dir}/*)
  list(SORT children)
  foreach(child ${children})
    if(IS_DIRECTORY ${dir}/${child} AND EXISTS ${dir}/${child}/CMakeLists.txt)
      add_subdirectory(${dir}/${child})
    endif()
  endforeach()
endfunction()

# A GoogleTest executable linked against libgna, registered with CTest under a label: cpu (runs
# in CI) or gpu (needs a CUDA device to do more than skip).
function(gna_add_labeled_test name label)
  add_executable(${name} ${ARGN})
  target_link_libraries(${name} PRIVATE gna GTest::gtest GTest::gtest_main)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 120 PROPERTIES LABELS ${label})
endfunction()
function(gna_add_test name)
  gna_add_labeled_test(${name} cpu ${ARGN})
endfunction()
function(gna_add_gpu_test name)
  gna_add_labeled_test(${name} gpu ${ARGN})
endfunction()

# CTest entries (label gpu) that run `target`'s tests matching `filter` in the shared-memory
# configurations of other GPUs, on any GPU with more: 163 KB per block (A100) and 99 KB
# (sm_86 / sm_89 / sm_120), capped by GNA_MAX_SHARED_MEMORY_BYTES. Named <target>_smem_<KB>k.
function(gna_add_shared_memory_cap_tests target filter)
  foreach(bytes 166912 101376)
    math(EXPR kb "${bytes} / 1024")
    add_test(NAME ${target}_smem_${kb}k COMMAND ${target} --gtest_filter=${filter})
    set_tests_properties(${target}_smem_${kb}k PROPERTIES LABELS gpu
                         ENVIRONMENT GNA_MAX_SHARED_MEMORY_BYTES=${bytes})
  endforeach()
endfunction()
