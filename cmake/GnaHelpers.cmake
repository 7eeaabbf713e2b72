# Every layer is an OBJECT library whose objects end up in the one shared library libgna, so
# backends that register themselves at static-initialisation time are always linked in.
function(gna_add_layer name)
  add_library(${name} OBJECT ${ARGN})
  target_include_directories(${name} PUBLIC ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(${name} PUBLIC Threads::Threads)
  set_property(GLOBAL APPEND PROPERTY GNA_LAYERS ${name})
endfunction()

# CUDA flags per architecture family. Hopper kernels: sm_90a only; portable kernels: sm_80 and
# sm_90 (runs on every sm_80+ GPU, the Hopper fallback included).
set(GNA_CUDA_FLAGS_HOPPER -gencode=arch=compute_90a,code=sm_90a)
set(GNA_CUDA_FLAGS_PORTABLE -gencode=arch=compute_80,code=sm_80 -gencode=arch=compute_90,code=sm_90
    -gencode=arch=compute_80,code=compute_80)
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
