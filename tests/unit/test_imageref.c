/* Image sources: registry parsing (Docker's rule), the address rule, the
 * image_registries allowlist and the fixed pull-failure texts. */
#include "check_util.h"
#include "imageref.h"

#include <string.h>

static const char *reg_of(const char *image)
{
    static char out[SBX_MAX_REGISTRY_BYTES + 1];
    ck_assert_int_eq(imageref_registry(image, out, sizeof out), 0);
    return out;
}

START_TEST(test_imageref_registry_follows_dockers_rule)
{
    ck_assert_str_eq(reg_of("busybox"), "docker.io");
    ck_assert_str_eq(reg_of("sandbox/busybox:latest"), "docker.io");
    ck_assert_str_eq(reg_of("library/busybox@sha256:0123456789abcdef0123456789abcdef"), "docker.io");
    ck_assert_str_eq(reg_of("127.0.0.1:5000/x:1"), "127.0.0.1:5000");
    ck_assert_str_eq(reg_of("localhost/x"), "localhost");
    ck_assert_str_eq(reg_of("localhost:5000/a/b"), "localhost:5000");
    ck_assert_str_eq(reg_of("Registry.Example.COM/x"), "registry.example.com");
    ck_assert_str_eq(reg_of("index.docker.io/library/busybox"), "docker.io");
    ck_assert_str_eq(reg_of("registry-1.docker.io/x/y"), "docker.io");
    ck_assert_str_eq(reg_of("ghcr.io/o/r:tag"), "ghcr.io");
    ck_assert_str_eq(reg_of("[::1]:5000/x"), "[::1]:5000");
    char small[4];
    ck_assert_int_eq(imageref_registry("ghcr.io/x", small, sizeof small), SBX_EINVAL);
    ck_assert_int_eq(imageref_registry(NULL, small, sizeof small), SBX_EINVAL);
}
END_TEST

START_TEST(test_imageref_address_rule_refuses_the_hosts_own_networks)
{
    static const char *const refused[][2] = {
        { "127.0.0.1:5000", "loopback" }, { "127.1", "loopback" }, { "0x7f.0.0.1:80", "loopback" },
        { "2130706433:80", "loopback" }, { "[::1]:5000", "loopback" }, { "[::ffff:127.0.0.1]:5000", "loopback" },
        { "0.0.0.0:5000", "unspecified" }, { "10.0.0.1", "private" }, { "172.16.3.4:443", "private" },
        { "172.31.255.255", "private" }, { "192.168.1.1", "private" }, { "100.64.0.1", "CGNAT" },
        { "100.127.255.254", "CGNAT" }, { "169.254.169.254", "link-local" }, { "[fe80::1]:80", "link-local" },
        { "[fd00::1]:80", "unique-local" }, { "[fc00::5]:80", "unique-local" }, { "8.8.8.8", "IP literal" },
        { "[2001:db8::1]:80", "IP literal" }, { "localhost", "localhost" }, { "localhost:5000", "localhost" },
        { "LOCALHOST:5000", "localhost" }, { "a.localhost", "localhost" }, { "localhost.", "localhost" },
        { "metadata.google.internal", "local-only" }, { "printer.local:631", "local-only" },
        { "myhost:5000", "single-label" }, { "foo.123", "IP literal" },
    };
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const char *why = imageref_address_refusal(refused[i][0]);
        ck_assert_msg(why && strstr(why, refused[i][1]), "%s: expected a refusal naming %s, got %s", refused[i][0],
                      refused[i][1], why ? why : "(allowed)");
    }
    static const char *const allowed[] = { "docker.io", "ghcr.io", "registry.example.com:5000", "100.ex.com",
                                           "172.32.0.1.example.org" };
    for (size_t i = 0; i < sizeof allowed / sizeof allowed[0]; i++)
        ck_assert_msg(imageref_address_refusal(allowed[i]) == NULL, "%s: refused as %s", allowed[i],
                      imageref_address_refusal(allowed[i]));
    /* just outside the refused ranges */
    ck_assert_str_eq(imageref_address_refusal("172.32.0.1"), "an IP literal");
    ck_assert_str_eq(imageref_address_refusal("100.128.0.1"), "an IP literal");
}
END_TEST

START_TEST(test_imageref_check_names_the_rule)
{
    char why[400];
    ck_assert_int_eq(imageref_check("", "127.0.0.1:5000/x:1", why, sizeof why), SBX_EPERM);
    ck_assert_str_eq(why, "registry 127.0.0.1:5000 is a loopback address; image_registries lists the allowed ones");
    ck_assert_int_eq(imageref_check("", "169.254.169.254/x", why, sizeof why), SBX_EPERM);
    ck_assert_msg(strstr(why, "link-local"), "%s", why);
    ck_assert_int_eq(imageref_check("", "sandbox/busybox:latest", why, sizeof why), 0);
    ck_assert_int_eq(imageref_check(NULL, "ghcr.io/x", why, sizeof why), 0);
    /* an entry naming the registry exactly allows it whatever its address */
    ck_assert_int_eq(imageref_check("127.0.0.1:5000", "127.0.0.1:5000/x:1", why, sizeof why), 0);
    ck_assert_int_eq(imageref_check(" ghcr.io , 127.0.0.1:5000 ", "127.0.0.1:5000/x:1", why, sizeof why), 0);
    /* not another port of it */
    ck_assert_int_eq(imageref_check("127.0.0.1:5000", "127.0.0.1:5001/x:1", why, sizeof why), SBX_EPERM);
    ck_assert_msg(strstr(why, "not in the server's image_registries"), "%s", why);
    /* a non-empty list refuses what it does not match, Docker Hub too */
    ck_assert_int_eq(imageref_check("ghcr.io", "busybox", why, sizeof why), SBX_EPERM);
    ck_assert_int_eq(imageref_check("docker.io", "busybox", why, sizeof why), 0);
    ck_assert_int_eq(imageref_check("index.docker.io", "busybox", why, sizeof why), 0);
    /* a pattern does not lift the address rule */
    ck_assert_int_eq(imageref_check("*", "10.0.0.1/x", why, sizeof why), SBX_EPERM);
    ck_assert_msg(strstr(why, "private"), "%s", why);
    ck_assert_int_eq(imageref_check("*", "ghcr.io/x", why, sizeof why), 0);
    ck_assert_int_eq(imageref_check("*.example.com", "r.example.com/x", why, sizeof why), 0);
    ck_assert_int_eq(imageref_check("*.example.com", "r.example.com:5000/x", why, sizeof why), SBX_EPERM);
    ck_assert_int_eq(imageref_check("*.example.com", "example.com/x", why, sizeof why), SBX_EPERM);
    ck_assert_int_eq(imageref_check("*.example.com", "evilexample.com/x", why, sizeof why), SBX_EPERM);
    ck_assert_int_eq(imageref_check("*.example.com:5000", "a.b.example.com:5000/x", why, sizeof why), 0);
}
END_TEST

START_TEST(test_imageref_list_syntax_is_strict)
{
    char why[200];
    static const char *const good[] = { "", " ", "*", "docker.io", "ghcr.io,quay.io", "*.example.com:5000",
                                        "127.0.0.1:5000", "[::1]:5000", "localhost:5000, registry.local" };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ck_assert_msg(imageref_list_valid(good[i], why, sizeof why), "%s: %s", good[i], why);
    static const char *const bad[] = { "https://ghcr.io", "ghcr.io/x", "ghcr.io,", ",ghcr.io", "a..b:x",
                                       "host:99999", "host:", "*example.com", "a.*.com", "[::1]", "[zz]:80",
                                       "-a.com", "a.com.", "ho st" };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        ck_assert_msg(!imageref_list_valid(bad[i], why, sizeof why), "%s accepted", bad[i]);
        ck_assert_msg(strstr(why, "not valid"), "%s: %s", bad[i], why);
    }
    char *big = unit_repeat('a', SBX_MAX_IMAGE_REGISTRIES_BYTES + 1);
    ck_assert(!imageref_list_valid(big, why, sizeof why));
    free(big);
}
END_TEST

START_TEST(test_imageref_tenant_entries_stay_within_the_server)
{
    char why[400];
    ck_assert_int_eq(imageref_entry_within("", "ghcr.io", why, sizeof why), 0);
    ck_assert_int_eq(imageref_entry_within("", "*", why, sizeof why), 0);
    ck_assert_int_eq(imageref_entry_within("", "127.0.0.1:5000", why, sizeof why), SBX_EPERM);
    ck_assert_msg(strstr(why, "loopback") && strstr(why, "only narrow"), "%s", why);
    ck_assert_int_eq(imageref_entry_within("127.0.0.1:5000", "127.0.0.1:5000", why, sizeof why), 0);
    ck_assert_int_eq(imageref_entry_within("ghcr.io", "quay.io", why, sizeof why), SBX_EPERM);
    ck_assert_int_eq(imageref_entry_within("ghcr.io", "*", why, sizeof why), SBX_EPERM);
    ck_assert_msg(strstr(why, "wider"), "%s", why);
    ck_assert_int_eq(imageref_entry_within("*.example.com", "*.a.example.com", why, sizeof why), 0);
    ck_assert_int_eq(imageref_entry_within("*.example.com", "r.example.com", why, sizeof why), 0);
    ck_assert_int_eq(imageref_entry_within("*.example.com", "*.com", why, sizeof why), SBX_EPERM);
    ck_assert_int_eq(imageref_entry_within("*", "10.0.0.1", why, sizeof why), SBX_EPERM);
}
END_TEST

START_TEST(test_imageref_pull_failures_get_fixed_text_only)
{
    static const struct {
        const char *msg;
        long status;
        imageref_pull_kind_t kind;
    } cases[] = {
        { "manifest for ghcr.io/x:1 not found: manifest unknown: manifest unknown", 0, IMAGEREF_PULL_NOT_FOUND },
        { "pull access denied for x, repository does not exist or may require 'docker login'", 404,
          IMAGEREF_PULL_NOT_FOUND },
        { "unauthorized: authentication required", 0, IMAGEREF_PULL_UNAUTHORIZED },
        { "Get \"http://127.0.0.1:9/v2/\": dial tcp 127.0.0.1:9: connect: connection refused", 500,
          IMAGEREF_PULL_UNREACHABLE },
        { "Get \"https://r.example/v2/\": dial tcp: lookup r.example: no such host", 500, IMAGEREF_PULL_UNREACHABLE },
        { "Get \"https://r.example/v2/\": net/http: request canceled (Client.Timeout exceeded)", 500,
          IMAGEREF_PULL_UNREACHABLE },
        { "error parsing HTTP 418 response body: invalid character 'S' looking for beginning of value: "
          "\"SECRET-0123\"", 500, IMAGEREF_PULL_OTHER },
        { NULL, 500, IMAGEREF_PULL_OTHER },
        { NULL, 404, IMAGEREF_PULL_NOT_FOUND },
        { "", 401, IMAGEREF_PULL_UNAUTHORIZED },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        ck_assert_msg(imageref_pull_kind(cases[i].msg, cases[i].status) == cases[i].kind, "case %zu: got %s", i,
                      imageref_pull_kind_name(imageref_pull_kind(cases[i].msg, cases[i].status)));
    char out[512];
    imageref_pull_message("127.0.0.1:5000/x:1", imageref_pull_kind(cases[6].msg, 500), out, sizeof out);
    ck_assert_str_eq(out, "cannot pull image 127.0.0.1:5000/x:1: the registry's answer was not a usable image "
                          "(the worker's log has Docker's text) (other)");
    ck_assert_ptr_null(strstr(out, "SECRET"));
    imageref_pull_message("ghcr.io/x", IMAGEREF_PULL_UNREACHABLE, out, sizeof out);
    ck_assert_str_eq(out, "cannot pull image ghcr.io/x: the registry could not be reached (unreachable)");
    imageref_pull_message("ghcr.io/x", (imageref_pull_kind_t)99, out, sizeof out);
    ck_assert_msg(strstr(out, "(other)"), "%s", out);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("imageref");
    unit_tcase_add(s, "imageref", UNIT_TESTS(
        test_imageref_registry_follows_dockers_rule,
        test_imageref_address_rule_refuses_the_hosts_own_networks,
        test_imageref_check_names_the_rule,
        test_imageref_list_syntax_is_strict,
        test_imageref_tenant_entries_stay_within_the_server,
        test_imageref_pull_failures_get_fixed_text_only,
    ));
    return s;
}
