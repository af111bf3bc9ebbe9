#include "gt_sha256.h"

#include <string.h>

#include <openssl/evp.h>

int gt_sha256(const void *buf, size_t len, unsigned char md[32])
{
    unsigned char full[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (!EVP_Digest(buf, len, full, &n, EVP_sha256(), NULL) || n != 32) {
        memset(md, 0, 32);
        return -1;
    }
    memcpy(md, full, 32);
    return 0;
}

int gt_sha256_hex(const void *buf, size_t len, char out[65])
{
    static const char digits[] = "0123456789abcdef";
    unsigned char md[32];
    if (gt_sha256(buf, len, md) != 0) {
        out[0] = '\0';
        return -1;
    }
    for (int i = 0; i < 32; i++) {
        out[2 * i] = digits[md[i] >> 4];
        out[2 * i + 1] = digits[md[i] & 15];
    }
    out[64] = '\0';
    return 0;
}
