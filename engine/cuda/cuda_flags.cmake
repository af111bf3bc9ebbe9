# giant_cuda_fix_flags(): the top CMakeLists.txt adds -Wall -Wextra -Werror
# (and the sanitizer flags) with add_compile_options, which reaches .cu files
# too, where nvcc rejects them.  Called in a folder that compiles CUDA, it
# limits the folder's options to non-CUDA languages and sets
# GIANT_CUDA_FLAGS (in the caller's scope) to their nvcc spelling.
macro(giant_cuda_fix_flags)
  get_directory_property(_gcf_opts COMPILE_OPTIONS)
  set(_gcf_new "")
  set(GIANT_CUDA_FLAGS "")
  foreach(_gcf_o IN LISTS _gcf_opts)
    if(_gcf_o MATCHES "^\\$<")
      list(APPEND _gcf_new "${_gcf_o}")          # already a generator expression
    else()
      list(APPEND _gcf_new "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${_gcf_o}>")
      if(_gcf_o STREQUAL "-Werror")
        list(APPEND GIANT_CUDA_FLAGS "$<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>")
        list(APPEND GIANT_CUDA_FLAGS "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Werror>")
      elseif(_gcf_o MATCHES "^-fsanitize=(.*)$")
        string(REPLACE "," ";" _gcf_san "${CMAKE_MATCH_1}")
        foreach(_gcf_s IN LISTS _gcf_san)
          list(APPEND GIANT_CUDA_FLAGS "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-fsanitize=${_gcf_s}>")
        endforeach()
      else()
        list(APPEND GIANT_CUDA_FLAGS "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${_gcf_o}>")
      endif()
    endif()
  endforeach()
  set_directory_properties(PROPERTIES COMPILE_OPTIONS "${_gcf_new}")
endmacro()
