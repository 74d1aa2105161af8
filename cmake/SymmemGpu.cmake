# Finds the GPU toolkits and decides which backend plugins to build.
# Sets SYMMEM_BUILD_CUDA, SYMMEM_BUILD_NCCL, SYMMEM_BUILD_NVSHMEM (ON/OFF) and, where found,
# NCCL_INCLUDE_DIR/NCCL_LIBRARY and NVSHMEM_INCLUDE_DIR/NVSHMEM_HOST_LIBRARY/NVSHMEM_DEVICE_LIBRARY.
# An AUTO backend that cannot be built is skipped with a message saying why; an ON one is an error.

function(symmem_backend_decision name found why)
  if(SYMMEM_WITH_${name} STREQUAL "OFF")
    set(SYMMEM_BUILD_${name} OFF PARENT_SCOPE)
    message(STATUS "symmem: ${name} backend disabled (SYMMEM_WITH_${name}=OFF)")
  elseif(found)
    set(SYMMEM_BUILD_${name} ON PARENT_SCOPE)
  elseif(SYMMEM_WITH_${name} STREQUAL "ON")
    message(FATAL_ERROR "symmem: SYMMEM_WITH_${name}=ON but ${why}")
  else()
    set(SYMMEM_BUILD_${name} OFF PARENT_SCOPE)
    message(STATUS "symmem: not building the ${name} backend: ${why}")
  endif()
endfunction()

# symmem_cuda_cxx20(): every CUDA target of the project compiles as CUDA C++20, since the .cu files
# include the public headers, which are C++20. Called once, right after enable_language(CUDA), in
# the top-level scope: every directory inherits CMAKE_CUDA_STANDARD and none names a standard.
# CMake 3.25.1 and older have no C++20 flag for nvcc (CUDA_STANDARD 20 fails with "the compiler
# does not support the language dialect CUDA20"); the if() supplies it. CMake 3.25.2 and newer
# define CMAKE_CUDA20_STANDARD_COMPILE_OPTION for nvcc >= 12 themselves, and the if() does
# nothing: once cmake_minimum_required is 3.25.2 or newer, delete the if() block.
# It runs after enable_language on purpose: CMake's own compiler check (a try_compile, which would
# not see the supplied flag) must not ask for CUDA20.
macro(symmem_cuda_cxx20)
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION
     AND CMAKE_CUDA_COMPILER_ID STREQUAL "NVIDIA"
     AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  set(CMAKE_CUDA_EXTENSIONS OFF)
endmacro()

# ---- CUDA --------------------------------------------------------------------------
set(_cuda_found OFF)
set(_cuda_why "")
if(SYMMEM_WITH_CUDA STREQUAL "OFF" AND SYMMEM_WITH_NCCL STREQUAL "OFF" AND SYMMEM_WITH_NVSHMEM STREQUAL "OFF")
  set(_cuda_why "disabled")
else()
  if(NOT CMAKE_CUDA_COMPILER AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      # sm_90 machine code plus compute_90 PTX, which newer GPUs JIT-compile.
      set(CMAKE_CUDA_ARCHITECTURES "90-real;90-virtual")
    endif()
    enable_language(CUDA)
    symmem_cuda_cxx20()
    find_package(CUDAToolkit)
    if(CMAKE_CUDA_COMPILER_VERSION VERSION_LESS 12.0)
      set(_cuda_why "nvcc ${CMAKE_CUDA_COMPILER_VERSION} has no C++20 (12.0 or newer is needed)")
    elseif(CUDAToolkit_FOUND)
      set(_cuda_found ON)
    else()
      set(_cuda_why "the CUDA toolkit libraries were not found")
    endif()
  else()
    set(_cuda_why "no CUDA compiler (nvcc) was found")
  endif()
endif()
symmem_backend_decision(CUDA ${_cuda_found} "${_cuda_why}")

# ---- NCCL (>= 2.28, for symmetric windows and the device API) ------------------------------
set(_nccl_found OFF)
set(_nccl_why "the CUDA toolkit is missing (${_cuda_why})")
if(_cuda_found)
  find_path(NCCL_INCLUDE_DIR nccl.h HINTS ENV NCCL_HOME ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ENV NCCL_HOME ${CUDAToolkit_LIBRARY_DIR}
               PATH_SUFFIXES lib lib64)
  if(NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
    file(STRINGS ${NCCL_INCLUDE_DIR}/nccl.h _nccl_code REGEX "^#define NCCL_VERSION_CODE ")
    string(REGEX REPLACE ".* ([0-9]+).*" "\\1" _nccl_code "${_nccl_code}")
    if(_nccl_code GREATER_EQUAL 22800)
      set(_nccl_found ON)
      message(STATUS "symmem: NCCL ${_nccl_code} at ${NCCL_LIBRARY}")
    else()
      set(_nccl_why "NCCL at ${NCCL_INCLUDE_DIR} is ${_nccl_code}; 2.28 (22800) or newer is needed")
    endif()
  else()
    set(_nccl_why "nccl.h or libnccl was not found (set NCCL_HOME)")
  endif()
endif()
symmem_backend_decision(NCCL ${_nccl_found} "${_nccl_why}")
if(SYMMEM_BUILD_NCCL AND NOT SYMMEM_BUILD_CUDA)
  message(FATAL_ERROR "symmem: the nccl backend reuses the cuda backend's kernels; enable SYMMEM_WITH_CUDA")
endif()

# ---- NVSHMEM: NVSHMEM_HOME, then NVSHMEMConfig.cmake, then the nvidia-nvshmem-cu13 wheel -------
set(_nvshmem_found OFF)
set(_nvshmem_why "the CUDA toolkit is missing (${_cuda_why})")
if(_cuda_found AND NOT SYMMEM_WITH_NVSHMEM STREQUAL "OFF")
  set(_nvshmem_roots "")
  if(DEFINED ENV{NVSHMEM_HOME})
    list(APPEND _nvshmem_roots $ENV{NVSHMEM_HOME})
  endif()
  find_package(NVSHMEM CONFIG QUIET)
  if(NVSHMEM_FOUND AND DEFINED NVSHMEM_DIR)
    get_filename_component(_cfg_root "${NVSHMEM_DIR}/../../.." ABSOLUTE)
    list(APPEND _nvshmem_roots ${_cfg_root})
  endif()
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND ${Python3_EXECUTABLE} -c
        "import nvidia, os; print(os.path.join(os.path.dirname(nvidia.__path__[0]), 'nvidia', 'nvshmem'))"
      OUTPUT_VARIABLE _wheel_root OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE _rc)
    if(_rc EQUAL 0 AND EXISTS "${_wheel_root}/include/nvshmem.h")
      list(APPEND _nvshmem_roots ${_wheel_root})
    endif()
  endif()
  foreach(root IN LISTS _nvshmem_roots)
    if(EXISTS "${root}/include/nvshmem.h")
      find_library(NVSHMEM_DEVICE_LIBRARY NAMES libnvshmem_device.a nvshmem_device
                   PATHS ${root}/lib ${root}/lib64 NO_DEFAULT_PATH)
      find_library(NVSHMEM_HOST_LIBRARY NAMES libnvshmem_host.so.3 libnvshmem_host.so nvshmem_host
                   PATHS ${root}/lib ${root}/lib64 NO_DEFAULT_PATH)
      if(NVSHMEM_DEVICE_LIBRARY AND NVSHMEM_HOST_LIBRARY)
        set(NVSHMEM_INCLUDE_DIR ${root}/include)
        get_filename_component(NVSHMEM_LIBRARY_DIR ${NVSHMEM_HOST_LIBRARY} DIRECTORY)
        set(_nvshmem_found ON)
        message(STATUS "symmem: NVSHMEM at ${root}")
        break()
      endif()
    endif()
  endforeach()
  if(NOT _nvshmem_found)
    set(_nvshmem_why "NVSHMEM was not found (looked at NVSHMEM_HOME, NVSHMEMConfig.cmake and the nvidia-nvshmem-cu13 wheel: '${_nvshmem_roots}')")
  endif()
endif()
symmem_backend_decision(NVSHMEM ${_nvshmem_found} "${_nvshmem_why}")
if(SYMMEM_BUILD_NVSHMEM AND NOT SYMMEM_BUILD_CUDA)
  message(FATAL_ERROR "symmem: the nvshmem backend reuses the cuda backend's kernels; enable SYMMEM_WITH_CUDA")
endif()
