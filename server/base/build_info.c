#include "build_info.h"

/* The values come from compile definitions set on this one file in
 * server/CMakeLists.txt, so a new commit recompiles only this file. */
#ifndef GIANT_VERSION
#define GIANT_VERSION "0.0.0"
#endif
#ifndef GIANT_GIT_COMMIT
#define GIANT_GIT_COMMIT "unknown"
#endif
#ifndef GIANT_BUILD_TYPE
#define GIANT_BUILD_TYPE "unknown"
#endif
#ifndef GIANT_BUILD_SANITIZE
#define GIANT_BUILD_SANITIZE 0
#endif

#ifdef GIANT_HAVE_CUDA
#define BUILD_CUDA 1
#else
#define BUILD_CUDA 0
#endif

#if defined(__clang__)
#define BUILD_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define BUILD_COMPILER "gcc " __VERSION__
#else
#define BUILD_COMPILER "unknown"
#endif

static const build_info info = {
    GIANT_VERSION, GIANT_GIT_COMMIT, GIANT_BUILD_TYPE, BUILD_COMPILER, BUILD_CUDA,
    GIANT_BUILD_SANITIZE,
};

const build_info *build_info_get(void)
{
    return &info;
}
