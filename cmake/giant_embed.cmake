# giant_embed(SYMBOL WHAT FILE...) writes SYMBOL.c in the calling directory's
# build directory, holding the files as the table SYMBOL (gt_embed.h), made
# by embed.cmake at build time; WHAT names them in the build log.  Included
# by the top CMakeLists.txt: the engine (the built-in geometries) and the
# service (migrations, the OpenAPI document, the dashboard) embed this way.
function(giant_embed symbol what)
  set(out ${CMAKE_CURRENT_BINARY_DIR}/${symbol}.c)
  # A ';' inside a COMMAND argument would split it into several arguments:
  # pass the file list '|'-separated instead (embed.cmake splits it back).
  string(REPLACE ";" "|" inputs "${ARGN}")
  add_custom_command(
    OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DOUT=${out} -DSYMBOL=${symbol} "-DINPUTS=${inputs}"
            -P ${CMAKE_SOURCE_DIR}/cmake/embed.cmake
    DEPENDS ${ARGN} ${CMAKE_SOURCE_DIR}/cmake/embed.cmake
    COMMENT "Embedding ${what}"
    VERBATIM)
endfunction()
