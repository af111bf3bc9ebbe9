/* gt_sha256: SHA-256 of a buffer, as 32 bytes or as 64 lowercase hex
 * digits: what checkpoints, model files, uploads and bearer tokens are
 * named and compared by.  OpenSSL's libcrypto computes it. */
#ifndef GT_SHA256_H
#define GT_SHA256_H

#include <stddef.h>

/* The digest of len bytes at buf into md.  0, or -1 when libcrypto
 * failed (md is then zeroed). */
int gt_sha256(const void *buf, size_t len, unsigned char md[32]);

/* The same as 64 lowercase hex digits and a NUL.  0, or -1 when libcrypto
 * failed (out is then the empty string). */
int gt_sha256_hex(const void *buf, size_t len, char out[65]);

#endif
