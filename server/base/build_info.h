/* build_info: facts about this binary, fixed at build time (version, git
 * commit, build type, options), for `giant version` and GET /v1/info. */
#ifndef BUILD_INFO_H
#define BUILD_INFO_H

typedef struct build_info {
    const char *version;       /* project version, e.g. "0.1.0"              */
    const char *git_commit;    /* short hash at configure time or "unknown"  */
    const char *build_type;    /* Release, RelWithDebInfo, Debug             */
    const char *compiler;      /* compiler name and version                  */
    int cuda;                  /* built with the CUDA backend                */
    int sanitizers;            /* built with ASan + UBSan                    */
} build_info;

const build_info *build_info_get(void);

#endif
