# Compile options for Bellows' own code, as INTERFACE targets that each component links.
add_library(bellows_warnings INTERFACE)
add_library(bellows::warnings ALIAS bellows_warnings)
target_compile_options(bellows_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>
  $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<BOOL:${BELLOWS_WARNINGS_AS_ERRORS}>>:-Werror>)

add_library(bellows_sanitizers INTERFACE)
add_library(bellows::sanitizers ALIAS bellows_sanitizers)
if(BELLOWS_SANITIZE)
  target_compile_options(bellows_sanitizers INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined>)
  target_link_options(bellows_sanitizers INTERFACE -fsanitize=address,undefined)
endif()
install(TARGETS bellows_warnings bellows_sanitizers EXPORT BellowsTargets)
