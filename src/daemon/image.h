/* Environments' OCI images: an OCI layout directory, or a `docker save` /
 * `podman save` archive (either format inside), unpacked with libarchive
 * into a content-addressed cache <state>/images/<manifest sha256>/ once.
 * The unpacking runs in a helper process (sbx_image_prepare is its body;
 * serve.c forks it and watches its pidfd): never on the loop. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

#define SBX_IMAGE_DIGEST_MAX 80 /* "sha256:" + 64 hex + '\0' */
/* What one image may unpack to: its bytes (all layers together) and entries. */
#define SBX_IMAGE_MAX_BYTES (8ULL << 30)
#define SBX_IMAGE_MAX_ENTRIES 1000000

/* The image's manifest digest ("sha256:<hex>"), read from its index.json
 * or, for a docker save archive of the older format, the config's digest
 * (the image id). Reads small JSON members only. */
int sbx_image_digest(const char *path, char digest[SBX_IMAGE_DIGEST_MAX], sbx_err *err);

/* The image unpacked under cache_dir (made 0700 when missing) unless it is
 * there already: rootfs gets <cache_dir>/<hex>. Entries are refused when a
 * path has a `..` component or a hard link leaves the root (the whole
 * image is refused), device nodes, fifos and sockets are left out, a
 * leading '/' is dropped, nothing is written through a symlink, set-id
 * bits are dropped and every file belongs to the caller (the daemon):
 * a sandbox sees them as nobody's, readable as their modes allow. Whiteouts
 * (.wh.NAME, .wh..wh..opq) remove what lower layers made. */
int sbx_image_prepare(const char *path, const char *cache_dir, char digest[SBX_IMAGE_DIGEST_MAX],
                      char *rootfs, size_t len, sbx_err *err);
