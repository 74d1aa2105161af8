# Python tests (label python; multi-rank ones also mp), run with the package from the build tree.
# pytest exits 77 when every test it ran was skipped (python/tests/conftest.py): ctest reports
# those as skipped, never as passed.
set(_py_env "PYTHONPATH=${CMAKE_CURRENT_BINARY_DIR}" "SYMMEM_TIMEOUT_MS=60000"
            "PYTHONDONTWRITEBYTECODE=1")
set(_pytest_args -q -p no:cacheprovider -rs)
set(_pytest ${Python_EXECUTABLE} -m pytest ${_pytest_args})
set(_tdir ${CMAKE_CURRENT_SOURCE_DIR}/tests)

function(symmem_py_test name)
  cmake_parse_arguments(T "" "NP;TIMEOUT" "FILES;LABELS;ENV;PYTEST_ARGS" ${ARGN})
  set(files)
  foreach(f IN LISTS T_FILES)
    list(APPEND files ${_tdir}/${f})
  endforeach()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  if(T_NP)
    add_test(NAME ${name}
             COMMAND $<TARGET_FILE:symmem-run> -n ${T_NP} --timeout ${T_TIMEOUT} -- ${_pytest}
                     ${T_PYTEST_ARGS} ${files}
             WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
    set(labels "python;mp;${T_LABELS}")
  else()
    add_test(NAME ${name} COMMAND ${_pytest} ${T_PYTEST_ARGS} ${files}
             WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
    set(labels "python;${T_LABELS}")
  endif()
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${T_TIMEOUT}
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_py_env}")
  if(T_ENV)
    set_property(TEST ${name} APPEND PROPERTY ENVIRONMENT "${T_ENV}")
  endif()
endfunction()

symmem_py_test(python_single FILES test_single.py test_store.py)
symmem_py_test(python_torch FILES test_torch.py test_import_order.py)
symmem_py_test(python_mp_2 NP 2 FILES test_mp.py)
symmem_py_test(python_mp_3 NP 3 FILES test_mp.py)
# The same backend-independent cases in GPU memory (suite.py; NOTE [backend suites]): skipped
# with the reason without torch or a GPU; scripts/gpu-check.sh runs them (step ctest_gpu_suite).
# Each test's name as it runs (-vv: the common arguments' -q takes one -v back), a failure's
# report as it happens (conftest.py) and a 20 s wait limit, inside a ctest limit shorter than
# the script's step: a stuck case ends in ctest's own timeout, whose output names it.
set(_suite_gpu_env "SYMMEM_TEST_DEVICE=cuda" "SYMMEM_ALLOW_SHARED_GPU=1" "NVSHMEM_DISABLE_NVLS=1"
                   "SYMMEM_TIMEOUT_MS=20000" "PYTHONUNBUFFERED=1" "SYMMEM_TEST_REPORT_NOW=1")
foreach(np 2 4)
  math(EXPR pct "100 / ${np}")
  symmem_py_test(ops_suite_py_cuda_np${np} NP ${np} TIMEOUT 140 FILES test_mp.py LABELS gpu
                 PYTEST_ARGS -vv ENV "${_suite_gpu_env};SYMMEM_BACKEND=cuda")
  symmem_py_test(ops_suite_py_nvshmem_np${np} NP ${np} TIMEOUT 140 FILES test_mp.py LABELS gpu
                 PYTEST_ARGS -vv
                 ENV "${_suite_gpu_env};SYMMEM_BACKEND=nvshmem"
                     "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=${pct}")
endforeach()
# Its CUDA cases share the one GPU under MPS in gpu-check (without the variable they skipped).
symmem_py_test(python_torch_mp_2 NP 2 FILES test_torch_mp.py LABELS gpu
               ENV "SYMMEM_ALLOW_SHARED_GPU=1")
# MoE dispatch and combine against the reference (issue #20): 2, 3, 4 and 8 ranks.
foreach(np 2 3 4 8)
  symmem_py_test(python_moe_${np} NP ${np} FILES test_moe.py)
endforeach()
# The same on CUDA tensors (GPU path), bitwise against the CPU calls: ranks share the GPU.
foreach(np 2 4)
  symmem_py_test(python_moe_gpu_${np} NP ${np} FILES test_moe_gpu.py LABELS gpu
                 ENV "SYMMEM_ALLOW_SHARED_GPU=1")
endforeach()
# GPU waits that time out (issues #17, #24): two ranks on one GPU.
symmem_py_test(python_gpu_waits_2 NP 2 TIMEOUT 120 FILES test_gpu_mp.py LABELS gpu
               ENV "SYMMEM_ALLOW_SHARED_GPU=1")
# Two ranks on cuda:0 without SYMMEM_ALLOW_SHARED_GPU: a clear error on every rank (issue #24).
symmem_py_test(python_gpu_refuse_2 NP 2 TIMEOUT 120 FILES test_gpu_refuse.py LABELS gpu
               ENV "SYMMEM_BACKEND=cuda")
# NVSHMEM-style signals and the dtypes that are only moved, on the GPU (issue #23): two ranks.
symmem_py_test(python_gpu_signals_2 NP 2 TIMEOUT 240 FILES test_gpu_signals.py LABELS gpu
               ENV "SYMMEM_ALLOW_SHARED_GPU=1")
# A torch MemPool over symmetric memory (issue #23): two ranks on the GPU.
symmem_py_test(python_gpu_mempool_2 NP 2 TIMEOUT 120 FILES test_gpu_mempool.py LABELS gpu
               ENV "SYMMEM_ALLOW_SHARED_GPU=1")

# Abort, shrink and grow (issue #17): the last of 3 ranks dies, symmem-run starts it again.
if(TARGET symmem-run)
  add_test(NAME python_recovery_3
           COMMAND $<TARGET_FILE:symmem-run> -n 3 --restart-failed 1 --timeout 120 --
                   ${_pytest} ${_tdir}/test_recovery.py
           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(python_recovery_3 PROPERTIES LABELS "python;mp" TIMEOUT 120
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_py_env}")
endif()

# The committed stub must match the module (regenerate with python/gen_stub.sh).
add_test(NAME python_stub
         COMMAND bash ${_tdir}/check_stub.sh ${PROJECT_SOURCE_DIR} ${PROJECT_BINARY_DIR}
                 ${CMAKE_CURRENT_BINARY_DIR}/_C.pyi.gen)
set_tests_properties(python_stub PROPERTIES LABELS "python" TIMEOUT 120 SKIP_RETURN_CODE 77
                     ENVIRONMENT "PYTHON=${Python_EXECUTABLE}")

# The CPU example runs as a test too.
if(TARGET symmem-run)
  add_test(NAME python_example_numpy
           COMMAND $<TARGET_FILE:symmem-run> -n 3 --timeout 120 -- ${Python_EXECUTABLE}
                   ${PROJECT_SOURCE_DIR}/examples/python/numpy_cpu.py)
  set_tests_properties(python_example_numpy PROPERTIES LABELS "python;mp" TIMEOUT 120
                       ENVIRONMENT "${_py_env}")
  # The MoE layer example (issue #20): exits 77 without torch.
  add_test(NAME python_example_moe
           COMMAND $<TARGET_FILE:symmem-run> -n 3 --timeout 240 -- ${Python_EXECUTABLE}
                   ${PROJECT_SOURCE_DIR}/examples/python/moe_layer.py)
  set_tests_properties(python_example_moe PROPERTIES LABELS "python;mp" TIMEOUT 240
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_py_env}")
endif()

# symmem.torch.symm_mem, torch's symmetric-memory surface (issue #23), under torchrun on CPU
# tensors; skipped (exit 77) where torch is not installed.
foreach(np 2 3)
  add_test(NAME python_symm_mem_${np}
           COMMAND ${Python_EXECUTABLE} ${_tdir}/torchrun_pytest.py ${np} ${_pytest_args}
                   ${_tdir}/test_symm_mem.py
           WORKING_DIRECTORY ${CMAKE_CURRENT_BINARY_DIR})
  set_tests_properties(python_symm_mem_${np} PROPERTIES LABELS "python;mp" TIMEOUT 300
                       SKIP_RETURN_CODE 77 ENVIRONMENT "${_py_env}")
endforeach()
