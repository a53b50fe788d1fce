/* Image sources: the registry an image reference pulls from (Docker's rule),
 * the address rule that keeps pulls off the worker host's own networks, the
 * image_registries allowlist, and the fixed texts a failed pull is reported
 * with (never the registry's own bytes). */
#ifndef SBX_IMAGEREF_H
#define SBX_IMAGEREF_H

#include <stdbool.h>
#include <stddef.h>

#include "limits.h"

/* The registry host[:port] image pulls from, lowercased: the first path
 * component when the reference has a "/" and that component contains "." or
 * ":" or is "localhost" (Docker's rule), otherwise Docker Hub. Docker Hub's
 * aliases (index.docker.io, registry-1.docker.io) all become "docker.io".
 * ret has at least SBX_MAX_REGISTRY_BYTES + 1 bytes. Returns 0, or
 * SBX_EINVAL when image is NULL or the registry is longer than that. */
int imageref_registry(const char *image, char *ret, size_t retlen);

/* Why the default address rule refuses registry (host[:port] as
 * imageref_registry writes it): a static phrase such as "a loopback
 * address", "localhost", "an IP literal" or "a single-label host name";
 * NULL when the rule lets it through. IPv4 literals are read the way the C
 * library reads them (inet_aton: 127.1 and 0x7f.0.0.1 are loopback too). */
const char *imageref_address_refusal(const char *registry);

/* How one allowlist entry matches registry: 0 not at all, 1 through a
 * pattern ("*" for any registry, "*.example.com[:port]" for any name below
 * example.com), 2 by naming it exactly (case-insensitive). */
int imageref_entry_match(const char *entry, const char *registry);

/* True when entry is "*", "*.DOMAIN[:PORT]", "HOST[:PORT]" or
 * "[IPV6]:PORT"; why (may be NULL) gets a reason otherwise. */
bool imageref_entry_valid(const char *entry, char *why, size_t whylen);

/* True when list (image_registries: comma-separated entries, blanks around
 * them ignored; "" for none) is valid; why names the bad entry otherwise. */
bool imageref_list_valid(const char *list, char *why, size_t whylen);

/* The server's rule for image: 0 when it may be pulled, SBX_EPERM with why
 * naming the rule otherwise. A registry that list names exactly is allowed
 * whatever its address (an operator's local registry); a non-empty list
 * refuses every registry it does not match; the address rule refuses the
 * rest (also those a pattern matches). SBX_EINVAL for an unreadable
 * reference. */
int imageref_check(const char *list, const char *image, char *why, size_t whylen);

/* Whether a tenant policy entry stays inside the server's list: 0, or
 * SBX_EPERM with why saying which rule it would loosen. */
int imageref_entry_within(const char *list, const char *entry, char *why, size_t whylen);

/* The kinds of pull failure a client is told about. */
typedef enum {
    IMAGEREF_PULL_NOT_FOUND = 0,
    IMAGEREF_PULL_UNAUTHORIZED,
    IMAGEREF_PULL_UNREACHABLE,
    IMAGEREF_PULL_OTHER,
} imageref_pull_kind_t;

/* The kind of a failed pull, from the Engine's error text (may be NULL) and
 * the HTTP status of its answer (0 when it answered 200 and failed in the
 * stream). */
imageref_pull_kind_t imageref_pull_kind(const char *engine_message, long status);

/* "cannot pull image IMAGE: REASON (KIND)", with only fixed text besides the
 * image reference: nothing the registry said. */
void imageref_pull_message(const char *image, imageref_pull_kind_t kind, char *out, size_t outlen);

/* "not_found", "unauthorized", "unreachable" or "other". */
const char *imageref_pull_kind_name(imageref_pull_kind_t kind);

#endif
