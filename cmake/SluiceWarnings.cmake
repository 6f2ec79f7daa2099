# Warnings are errors for our own code only (third-party headers come in as SYSTEM).
# GCC 12 reports false -Wrestrict errors on `"literal" + std::string` at -O3
# (GCC bug 105651); that one check is off there.
function(sluice_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Werror -Wno-missing-field-initializers>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict>)
endfunction()

# One static library per module: sluice_module(NAME sources... DEPS libs...)
function(sluice_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(sluice_${name} STATIC ${ARG_SOURCES})
  target_include_directories(sluice_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(sluice_${name} PUBLIC ${ARG_DEPS})
  sluice_warnings(sluice_${name})
endfunction()
