/* Unit tests for the settings table and its sources (common/config.c). */
#include "check_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "errors.h"

/* Writes text to a fresh temporary file; returns its path (static buffer). */
static const char *write_temp(const char *text)
{
    static char path[64];
    snprintf(path, sizeof path, "/tmp/sbx-test-config-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    size_t n = strlen(text);
    ck_assert_int_eq(write(fd, text, n), (ssize_t)n);
    close(fd);
    return path;
}

/* Loads a file holding text into c (initialised here; the caller releases it)
 * and asserts that the load is refused with the message "<path>:<where_why>". */
static void load_bad_file(cfg_t *c, const char *text, const char *where_why)
{
    const char *path = write_temp(text);
    char err[512] = "", want[512];
    ck_assert_int_eq(cfg_init(c), 0);
    ck_assert_int_eq(cfg_load_file(c, path, err, sizeof err), SBX_EINVAL);
    snprintf(want, sizeof want, "%s:%s", path, where_why);
    ck_assert_str_eq(err, want);
    unlink(path);
}

/* Output of cfg_print as a malloc'd string. */
static char *print_to_string(const cfg_t *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    cfg_print(c, f);
    fclose(f);
    return buf;
}

/* cfg_print's output (malloc'd) for the defaults with the setting name set to
 * value from source. */
static char *print_with(const char *name, const char *value, const char *source)
{
    cfg_t c;
    char err[256] = "";
    ck_assert_int_eq(cfg_init(&c), 0);
    ck_assert_int_eq(cfg_set(&c, name, value, source, err, sizeof err), 0);
    char *out = print_to_string(&c);
    cfg_release(&c);
    return out;
}

/* Asserts that setting name (from source) to each of the n bad values is
 * refused with the message want_fmt(value). */
static void expect_each_value_refused(cfg_t *c, const char *name, const char *source, const char *const bad[],
                                      size_t n, const char *want_fmt)
{
    for (size_t i = 0; i < n; i++) {
        char err[256] = "", want[256];
        ck_assert_msg(cfg_set(c, name, bad[i], source, err, sizeof err) == SBX_EINVAL, "accepted \"%s\"", bad[i]);
        snprintf(want, sizeof want, want_fmt, bad[i]);
        ck_assert_str_eq(err, want);
    }
}

static void unset_sandbox_env(void)
{
    const cfg_setting_t *t = cfg_settings();
    for (int i = 0; i < CFG__COUNT; i++) {
        char name[96] = "SANDBOX_";
        size_t o = strlen(name);
        for (const char *p = t[i].name; *p; p++)
            name[o++] = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
        name[o] = '\0';
        unsetenv(name);
    }
}

/* ---- table and defaults ---- */

START_TEST(test_every_setting_has_a_default_after_init)
{
    const cfg_setting_t *t = cfg_settings();
    cfg_t c;
    ck_assert_int_eq(cfg_init(&c), 0);
    for (int i = 0; i < CFG__COUNT; i++) {
        ck_assert_ptr_nonnull(t[i].name);
        ck_assert_ptr_nonnull(t[i].default_value);
        ck_assert_ptr_nonnull(t[i].help);
        ck_assert_ptr_nonnull(c.values[i]);
        ck_assert_str_eq(c.values[i], t[i].default_value);
        ck_assert_str_eq(c.sources[i], "default");
    }
    cfg_release(&c);
}
END_TEST

START_TEST(test_every_default_passes_its_own_validation)
{
    const cfg_setting_t *t = cfg_settings();
    cfg_t c;
    ck_assert_int_eq(cfg_init(&c), 0);
    for (int i = 0; i < CFG__COUNT; i++) {
        char err[256] = "";
        ck_assert_msg(cfg_set(&c, t[i].name, t[i].default_value, "test", err, sizeof err) == 0,
                      "default of %s rejected: %s", t[i].name, err);
        if (t[i].type == CFGT_INT) {
            ck_assert_int_le(t[i].min, t[i].max);
            ck_assert_int_ge(cfg_int(&c, (cfg_key_t)i), t[i].min);
            ck_assert_int_le(cfg_int(&c, (cfg_key_t)i), t[i].max);
        }
    }
    cfg_release(&c);
}
END_TEST

START_TEST(test_setting_names_are_unique_snake_case)
{
    const cfg_setting_t *t = cfg_settings();
    for (int i = 0; i < CFG__COUNT; i++) {
        ck_assert_uint_gt(strlen(t[i].name), 0);
        ck_assert_uint_eq(strspn(t[i].name, "abcdefghijklmnopqrstuvwxyz0123456789_"), strlen(t[i].name));
        for (int j = i + 1; j < CFG__COUNT; j++)
            ck_assert_str_ne(t[i].name, t[j].name);
    }
}
END_TEST

START_TEST(test_known_defaults_have_documented_values)
{
    cfg_t c;
    ck_assert_int_eq(cfg_init(&c), 0);
    ck_assert_str_eq(cfg_str(&c, CFG_LISTEN), "127.0.0.1:8080");
    ck_assert_str_eq(cfg_str(&c, CFG_DATABASE_URL), "");
    ck_assert_str_eq(cfg_str(&c, CFG_LOG_LEVEL), "info");
    ck_assert_int_eq(cfg_int(&c, CFG_LEASE_SECONDS), 30);
    ck_assert_int_eq(cfg_int(&c, CFG_MAX_ATTEMPTS), 3);
    ck_assert_int_eq(cfg_int(&c, CFG_EXEC_OUTPUT_DEFAULT_BYTES), 65536);
    ck_assert_int_eq(cfg_int(&c, CFG_MAX_BODY_BYTES), 1048576);
    cfg_release(&c);
}
END_TEST

/* ---- cfg_set ---- */

START_TEST(test_set_int_accepts_range_bounds)
{
    cfg_t c;
    char err[256] = "";
    ck_assert_int_eq(cfg_init(&c), 0);
    ck_assert_int_eq(cfg_set(&c, "lease_seconds", "2", "flag", err, sizeof err), 0);
    ck_assert_int_eq(cfg_int(&c, CFG_LEASE_SECONDS), 2);
    ck_assert_str_eq(c.sources[CFG_LEASE_SECONDS], "flag");
    ck_assert_int_eq(cfg_set(&c, "lease_seconds", "3600", "flag", err, sizeof err), 0);
    ck_assert_int_eq(cfg_int(&c, CFG_LEASE_SECONDS), 3600);
    cfg_release(&c);
}
END_TEST

START_TEST(test_set_int_out_of_range_is_rejected_and_keeps_old_value)
{
    cfg_t c;
    char err[256] = "";
    ck_assert_int_eq(cfg_init(&c), 0);
    ck_assert_int_eq(cfg_set(&c, "lease_seconds", "1", "flag", err, sizeof err), SBX_EINVAL);
    ck_assert_str_eq(err, "lease_seconds must be between 2 and 3600 (got 1)");
    ck_assert_int_eq(cfg_set(&c, "lease_seconds", "3601", "flag", err, sizeof err), SBX_EINVAL);
    ck_assert_str_eq(err, "lease_seconds must be between 2 and 3600 (got 3601)");
    ck_assert_int_eq(cfg_set(&c, "worker_slots", "-5", "flag", err, sizeof err), SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "worker_slots"));
    ck_assert_int_eq(cfg_set(&c, "max_body_bytes", "99999999999999999999999", "flag", err, sizeof err),
                     SBX_EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "max_body_bytes"));
    ck_assert_int_eq(cfg_int(&c, CFG_LEASE_SECONDS), 30);
    ck_assert_str_eq(c.sources[CFG_LEASE_SECONDS], "default");
    cfg_release(&c);
}
END_TEST

START_TEST(test_set_int_non_integer_is_rejected)
{
    static const char *const bad[] = { "", "abc", "12abc", "1.5", "0x10", "30s", "3 0" };
    cfg_t c;
    ck_assert_int_eq(cfg_init(&c), 0);
    expect_each_value_refused(&c, "lease_seconds", "file", bad, sizeof bad / sizeof *bad,
                              "lease_seconds must be an integer (got \"%s\")");
    ck_assert_int_eq(cfg_int(&c, CFG_LEASE_SECONDS), 30);
    cfg_release(&c);
}
END_TEST

START_TEST(test_set_unknown_setting_is_rejected)
{
    cfg_t c;
    char err[256] = "";
    ck_assert_int_eq(cfg_init(&c), 0);
    ck_assert_int_eq(cfg_set(&c, "no_such_setting", "1", "flag", err, sizeof err), SBX_EINVAL);
    ck_assert_str_eq(err, "unknown setting \"no_such_setting\"");
    ck_assert_int_eq(cfg_set(&c, "LISTEN", "a:1", "flag", err, sizeof err), SBX_EINVAL);
    cfg_release(&c);
}
END_TEST

START_TEST(test_set_log_level_accepts_only_known_levels)
{
    static const char *good[] = { "debug", "info", "warn", "error" };
    static const char *const bad[] = { "", "trace", "INFO", "warning", "info " };
    cfg_t c;
    ck_assert_int_eq(cfg_init(&c), 0);
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        char err[256] = "";
        ck_assert_int_eq(cfg_set(&c, "log_level", good[i], "env", err, sizeof err), 0);
        ck_assert_str_eq(cfg_str(&c, CFG_LOG_LEVEL), good[i]);
    }
    expect_each_value_refused(&c, "log_level", "env", bad, sizeof bad / sizeof *bad,
                              "log_level must be debug, info, warn or error (got \"%s\")");
    ck_assert_str_eq(cfg_str(&c, CFG_LOG_LEVEL), "error");
    cfg_release(&c);
}
END_TEST

START_TEST(test_set_listen_requires_host_and_port)
{
    static const char *good[] = { "0.0.0.0:80", "localhost:8080", "[::1]:9000" };
    static const char *const bad[] = { "", "8080", "localhost", ":8080", "localhost:" };
    cfg_t c;
    ck_assert_int_eq(cfg_init(&c), 0);
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        char err[256] = "";
        ck_assert_msg(cfg_set(&c, "listen", good[i], "flag", err, sizeof err) == 0, "rejected %s: %s", good[i],
                      err);
        ck_assert_str_eq(cfg_str(&c, CFG_LISTEN), good[i]);
    }
    expect_each_value_refused(&c, "listen", "flag", bad, sizeof bad / sizeof *bad,
                              "listen must be HOST:PORT (got \"%s\")");
    cfg_release(&c);
}
END_TEST

START_TEST(test_set_string_accepts_any_value)
{
    cfg_t c;
    char err[256] = "";
    ck_assert_int_eq(cfg_init(&c), 0);
    ck_assert_int_eq(cfg_set(&c, "data_dir", "/var/lib/sandbox", "file", err, sizeof err), 0);
    ck_assert_str_eq(cfg_str(&c, CFG_DATA_DIR), "/var/lib/sandbox");
    ck_assert_int_eq(cfg_set(&c, "worker_name", "", "file", err, sizeof err), 0);
    ck_assert_str_eq(cfg_str(&c, CFG_WORKER_NAME), "");
    cfg_release(&c);
}
END_TEST

START_TEST(test_default_image_is_validated_as_an_image_reference)
{
    cfg_t c;
    char err[256] = "";
    ck_assert_int_eq(cfg_init(&c), 0);
    ck_assert_str_eq(cfg_str(&c, CFG_DEFAULT_IMAGE), "sandbox/busybox:latest");
    ck_assert_int_eq(cfg_set(&c, "default_image", "registry.local:5000/team/base:1", "flag", err, sizeof err), 0);
    ck_assert_str_eq(cfg_str(&c, CFG_DEFAULT_IMAGE), "registry.local:5000/team/base:1");
    static const char *bad[] = { "", "Busybox", "a b", "img:", "/x" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        ck_assert_int_eq(cfg_set(&c, "default_image", bad[i], "flag", err, sizeof err), SBX_EINVAL);
        ck_assert_msg(strstr(err, "default_image") != NULL, "error for \"%s\": %s", bad[i], err);
    }
    ck_assert_str_eq(cfg_str(&c, CFG_DEFAULT_IMAGE), "registry.local:5000/team/base:1");
    cfg_release(&c);
}
END_TEST

START_TEST(test_image_registries_is_validated_as_a_registry_list)
{
    cfg_t c;
    char err[256] = "";
    ck_assert_int_eq(cfg_init(&c), 0);
    ck_assert_str_eq(cfg_str(&c, CFG_IMAGE_REGISTRIES), "");
    ck_assert(cfg_setting_roles(CFG_IMAGE_REGISTRIES) & CFG_ROLE_CONTROLLER);
    ck_assert(cfg_setting_roles(CFG_IMAGE_REGISTRIES) & CFG_ROLE_WORKER);
    ck_assert_int_eq(cfg_set(&c, "image_registries", "127.0.0.1:5000, docker.io,*.example.com", "flag", err,
                             sizeof err), 0);
    static const char *bad[] = { "https://ghcr.io", "ghcr.io/x", "a.com,", "host:0" };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        err[0] = '\0';
        ck_assert_int_eq(cfg_set(&c, "image_registries", bad[i], "flag", err, sizeof err), SBX_EINVAL);
        ck_assert_msg(strstr(err, "image_registries") != NULL, "error for \"%s\": %s", bad[i], err);
    }
    ck_assert_str_eq(cfg_str(&c, CFG_IMAGE_REGISTRIES), "127.0.0.1:5000, docker.io,*.example.com");
    cfg_release(&c);
}
END_TEST

START_TEST(test_worker_runtime_accepts_only_docker)
{
    static const char *const bad[] = { "", "Docker", "firecracker", "docker ", "docker,docker", "docker,",
                                       ",external", "docker,,external" };
    cfg_t c;
    ck_assert_int_eq(cfg_init(&c), 0);
    ck_assert_str_eq(cfg_str(&c, CFG_WORKER_RUNTIME), "docker");
    ck_assert(cfg_setting_roles(CFG_WORKER_RUNTIME) & CFG_ROLE_WORKER);
    ck_assert(!(cfg_setting_roles(CFG_WORKER_RUNTIME) & CFG_ROLE_CONTROLLER));
    char err[256] = "";
    ck_assert_int_eq(cfg_set(&c, "worker_runtime", "docker", "flag", err, sizeof err), 0);
    expect_each_value_refused(&c, "worker_runtime", "flag", bad, sizeof bad / sizeof *bad,
                              "worker_runtime must be a comma-separated list of docker, external, each at most "
                              "once (got \"%s\")");
    ck_assert_str_eq(cfg_str(&c, CFG_WORKER_RUNTIME), "docker");
    /* a list of backends: one worker holding several (docs/runtime-drivers.md) */
    static const char *const good[] = { "external", "docker,external", "external,docker" };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        ck_assert_msg(cfg_set(&c, "worker_runtime", good[i], "flag", err, sizeof err) == 0, "%s: %s", good[i], err);
        ck_assert_str_eq(cfg_str(&c, CFG_WORKER_RUNTIME), good[i]);
    }
    ck_assert(cfg_setting_roles(CFG_WORKER_DRIVER_COMMAND) & CFG_ROLE_WORKER);
    ck_assert_str_eq(cfg_str(&c, CFG_WORKER_DRIVER_COMMAND), "");
    ck_assert_int_eq(cfg_set(&c, "worker_driver_command", "[\"/usr/bin/python3\",\"/a b.py\"]", "flag", err,
                             sizeof err), 0);
    static const char *const bad_cmd[] = { "/usr/bin/driver", "[]", "[\"\"]", "[1]", "{}", "[\"a\"" };
    expect_each_value_refused(&c, "worker_driver_command", "flag", bad_cmd, sizeof bad_cmd / sizeof *bad_cmd,
                              "worker_driver_command must be a JSON array of 1..64 non-empty strings, e.g. "
                              "[\"/usr/lib/sandbox/sandbox-vmm\"]");
    cfg_release(&c);
}
END_TEST

START_TEST(test_every_setting_names_the_commands_it_applies_to)
{
    const cfg_setting_t *t = cfg_settings();
    for (int i = 0; i < CFG__COUNT; i++)
        ck_assert_msg(cfg_setting_roles((cfg_key_t)i) != 0, "setting %s has no role (common/config.c roles[])",
                      t[i].name);
    ck_assert(cfg_setting_roles(CFG_ROUTE_LISTEN) & CFG_ROLE_CONTROLLER);
    ck_assert(!(cfg_setting_roles(CFG_ROUTE_LISTEN) & CFG_ROLE_WORKER));
    ck_assert(cfg_setting_roles(CFG_DOCKER_SOCKET) & CFG_ROLE_WORKER);
    ck_assert(cfg_setting_roles(CFG_DATABASE_URL) & CFG_ROLE_DATABASE);
    ck_assert_uint_eq(cfg_setting_roles(CFG__COUNT), 0);
}
END_TEST

/* ---- file ---- */

START_TEST(test_file_sets_values_skipping_comments_and_blank_lines)
{
    const char *path = write_temp("# Sandbox configuration\n"
                                  "\n"
                                  "   \n"
                                  "listen = 0.0.0.0:9090\n"
                                  "  # indented comment\n"
                                  "lease_seconds=45\n"
                                  "\tlog_level\t=\tdebug   \n"
                                  "data_dir = \"/srv/sandbox data\"\n"
                                  "worker_labels = \"\"\n"
                                  "database_url = postgres:///sbx?sslmode=disable\n"
                                  "max_attempts = 5"); /* no final newline */
    cfg_t c;
    char err[512] = "";
    ck_assert_int_eq(cfg_init(&c), 0);
    ck_assert_int_eq(cfg_set(&c, "worker_labels", "x=y", "flag", err, sizeof err), 0);
    ck_assert_msg(cfg_load_file(&c, path, err, sizeof err) == 0, "load failed: %s", err);
    ck_assert_str_eq(cfg_str(&c, CFG_LISTEN), "0.0.0.0:9090");
    ck_assert_int_eq(cfg_int(&c, CFG_LEASE_SECONDS), 45);
    ck_assert_str_eq(cfg_str(&c, CFG_LOG_LEVEL), "debug");
    ck_assert_str_eq(cfg_str(&c, CFG_DATA_DIR), "/srv/sandbox data");
    ck_assert_str_eq(cfg_str(&c, CFG_WORKER_LABELS), "");
    ck_assert_str_eq(cfg_str(&c, CFG_DATABASE_URL), "postgres:///sbx?sslmode=disable");
    ck_assert_int_eq(cfg_int(&c, CFG_MAX_ATTEMPTS), 5);
    ck_assert_str_eq(c.sources[CFG_LISTEN], "file");
    ck_assert_str_eq(c.sources[CFG_HTTP_THREADS], "default");
    cfg_release(&c);
    unlink(path);
}
END_TEST

START_TEST(test_file_unknown_key_error_names_file_and_line)
{
    cfg_t c;
    load_bad_file(&c, "# comment\nlisten = 127.0.0.1:1\n\nbogus_key = 1\nlease_seconds = 40\n",
                  "4: unknown setting \"bogus_key\"");
    /* Lines after the error are not applied. */
    ck_assert_int_eq(cfg_int(&c, CFG_LEASE_SECONDS), 30);
    cfg_release(&c);
}
END_TEST

START_TEST(test_file_bad_value_error_names_file_line_and_reason)
{
    cfg_t c;
    load_bad_file(&c, "lease_seconds = 40\nmax_attempts = many\n",
                  "2: max_attempts must be an integer (got \"many\")");
    cfg_release(&c);
}
END_TEST

START_TEST(test_file_out_of_range_value_is_an_error)
{
    cfg_t c;
    load_bad_file(&c, "max_attempts = 0\n", "1: max_attempts must be between 1 and 100 (got 0)");
    cfg_release(&c);
}
END_TEST

START_TEST(test_file_line_without_equals_is_an_error)
{
    cfg_t c;
    load_bad_file(&c, "\nlisten 127.0.0.1:80\n", "2: expected \"key = value\"");
    cfg_release(&c);
}
END_TEST

START_TEST(test_missing_file_is_an_io_error_naming_it)
{
    cfg_t c;
    char err[512] = "";
    ck_assert_int_eq(cfg_init(&c), 0);
    ck_assert_int_eq(cfg_load_file(&c, "/nonexistent/sandbox.conf", err, sizeof err), SBX_EIO);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/sandbox.conf"));
    cfg_release(&c);
}
END_TEST

/* ---- environment ---- */

START_TEST(test_env_overrides_file)
{
    unset_sandbox_env();
    const char *path = write_temp("database_url = postgres://file/db\nlease_seconds = 40\nlog_level = warn\n");
    cfg_t c;
    char err[512] = "";
    ck_assert_int_eq(cfg_init(&c), 0);
    ck_assert_int_eq(cfg_load_file(&c, path, err, sizeof err), 0);
    setenv("SANDBOX_DATABASE_URL", "postgres://env/db", 1);
    setenv("SANDBOX_LEASE_SECONDS", "50", 1);
    ck_assert_msg(cfg_load_env(&c, err, sizeof err) == 0, "env failed: %s", err);
    ck_assert_str_eq(cfg_str(&c, CFG_DATABASE_URL), "postgres://env/db");
    ck_assert_str_eq(c.sources[CFG_DATABASE_URL], "env");
    ck_assert_int_eq(cfg_int(&c, CFG_LEASE_SECONDS), 50);
    ck_assert_str_eq(c.sources[CFG_LEASE_SECONDS], "env");
    /* Not in the environment: the file's value stays. */
    ck_assert_str_eq(cfg_str(&c, CFG_LOG_LEVEL), "warn");
    ck_assert_str_eq(c.sources[CFG_LOG_LEVEL], "file");
    cfg_release(&c);
    unlink(path);
    unset_sandbox_env();
}
END_TEST

START_TEST(test_env_bad_value_error_names_variable)
{
    unset_sandbox_env();
    setenv("SANDBOX_MAX_ATTEMPTS", "lots", 1);
    cfg_t c;
    char err[512] = "";
    ck_assert_int_eq(cfg_init(&c), 0);
    ck_assert_int_eq(cfg_load_env(&c, err, sizeof err), SBX_EINVAL);
    ck_assert_str_eq(err, "SANDBOX_MAX_ATTEMPTS: max_attempts must be an integer (got \"lots\")");
    cfg_release(&c);
    unset_sandbox_env();
}
END_TEST

START_TEST(test_env_without_sandbox_variables_changes_nothing)
{
    unset_sandbox_env();
    setenv("DATABASE_URL", "postgres://other/db", 1);
    cfg_t c;
    char err[512] = "";
    ck_assert_int_eq(cfg_init(&c), 0);
    ck_assert_int_eq(cfg_load_env(&c, err, sizeof err), 0);
    for (int i = 0; i < CFG__COUNT; i++)
        ck_assert_str_eq(c.sources[i], "default");
    cfg_release(&c);
    unsetenv("DATABASE_URL");
}
END_TEST

/* ---- flags ---- */

START_TEST(test_flag_lookup_finds_settings_with_and_without_value)
{
    ck_assert_int_eq(cfg_flag_lookup("--database-url"), CFG_DATABASE_URL);
    ck_assert_int_eq(cfg_flag_lookup("--database-url=x"), CFG_DATABASE_URL);
    ck_assert_int_eq(cfg_flag_lookup("--database-url=postgres://u@h/db?a=b"), CFG_DATABASE_URL);
    ck_assert_int_eq(cfg_flag_lookup("--listen"), CFG_LISTEN);
    ck_assert_int_eq(cfg_flag_lookup("--operation-deadline-seconds=60"), CFG_OPERATION_DEADLINE_SECONDS);
    ck_assert_int_eq(cfg_flag_lookup("--log-level=debug"), CFG_LOG_LEVEL);
}
END_TEST

START_TEST(test_flag_lookup_for_every_table_entry)
{
    const cfg_setting_t *t = cfg_settings();
    for (int i = 0; i < CFG__COUNT; i++) {
        char flag[128] = "--";
        size_t o = 2;
        for (const char *p = t[i].name; *p; p++)
            flag[o++] = *p == '_' ? '-' : *p;
        flag[o] = '\0';
        ck_assert_int_eq(cfg_flag_lookup(flag), i);
    }
}
END_TEST

START_TEST(test_flag_lookup_rejects_unknown_flags)
{
    ck_assert_int_eq(cfg_flag_lookup("--no-such-flag"), -1);
    ck_assert_int_eq(cfg_flag_lookup("--no-such-flag=1"), -1);
    ck_assert_int_eq(cfg_flag_lookup("--"), -1);
    ck_assert_int_eq(cfg_flag_lookup("--="), -1);
    ck_assert_int_eq(cfg_flag_lookup("-listen"), -1);
    ck_assert_int_eq(cfg_flag_lookup("listen"), -1);
    ck_assert_int_eq(cfg_flag_lookup(""), -1);
    ck_assert_int_eq(cfg_flag_lookup("--database-url-x"), -1);
    ck_assert_int_eq(cfg_flag_lookup("--Listen"), -1);
}
END_TEST

/* ---- getters ---- */

START_TEST(test_bool_getter_reads_true_and_one)
{
    /* The table has no bool setting yet: exercise the getter on a string slot. */
    cfg_t c;
    char err[256] = "";
    ck_assert_int_eq(cfg_init(&c), 0);
    static const struct { const char *v; bool want; } cases[] = {
        { "true", true }, { "TRUE", true }, { "1", true }, { "false", false }, { "0", false }, { "", false },
        { "yes", false },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        ck_assert_int_eq(cfg_set(&c, "worker_name", cases[i].v, "test", err, sizeof err), 0);
        ck_assert_int_eq(cfg_bool(&c, CFG_WORKER_NAME), cases[i].want);
    }
    cfg_release(&c);
}
END_TEST

/* ---- print ---- */

START_TEST(test_print_lists_every_setting_with_source)
{
    char *out = print_with("lease_seconds", "42", "flag");
    const cfg_setting_t *t = cfg_settings();
    for (int i = 0; i < CFG__COUNT; i++)
        ck_assert_msg(strstr(out, t[i].name) != NULL, "%s missing from:\n%s", t[i].name, out);
    ck_assert_ptr_nonnull(strstr(out, "# flag"));
    ck_assert_ptr_nonnull(strstr(out, "# default"));
    ck_assert_ptr_nonnull(strstr(out, "42"));
    free(out);
}
END_TEST

START_TEST(test_print_masks_worker_token)
{
    char *out = print_with("worker_token", "sbt_supersecretvalue", "env");
    ck_assert_ptr_null(strstr(out, "supersecret"));
    ck_assert_ptr_nonnull(strstr(out, "(set, hidden)"));
    free(out);
}
END_TEST

START_TEST(test_print_masks_database_url_credentials)
{
    static const char *urls[] = {
        "postgres://sbx:hunter2pw@db.example:5432/sandbox",
        "postgresql://sbx@db.example/sandbox?password=hunter2pw",
        "host=db.example user=sbx password=hunter2pw dbname=sandbox",
        "postgresql:///sandbox?host=/run/pg&PASSWORD=hunter2pw",
    };
    for (size_t i = 0; i < sizeof urls / sizeof *urls; i++) {
        char *out = print_with("database_url", urls[i], "file");
        ck_assert_msg(strstr(out, "hunter2pw") == NULL, "credentials of %s printed:\n%s", urls[i], out);
        ck_assert_ptr_nonnull(strstr(out, "(set, hidden: contains credentials)"));
        free(out);
    }
}
END_TEST

START_TEST(test_print_masks_nats_url_credentials)
{
    char *out = print_with("nats_url", "nats://sbx:hunter2pw@nats.example:4222", "file");
    ck_assert_msg(strstr(out, "hunter2pw") == NULL, "nats_url credentials printed:\n%s", out);
    ck_assert_ptr_nonnull(strstr(out, "(set, hidden: contains credentials)"));
    free(out);
}
END_TEST

START_TEST(test_print_shows_database_url_without_credentials)
{
    char *out = print_with("database_url", "postgres:///sandbox", "file");
    ck_assert_ptr_nonnull(strstr(out, "postgres:///sandbox"));
    ck_assert_ptr_null(strstr(out, "hidden"));
    free(out);
}
END_TEST

Suite *unit_suite(void)
{
    Suite *s = suite_create("config");
    unit_tcase_add(s, "table", UNIT_TESTS(
        test_every_setting_has_a_default_after_init,
        test_every_default_passes_its_own_validation,
        test_setting_names_are_unique_snake_case,
        test_known_defaults_have_documented_values,
    ));
    unit_tcase_add(s, "set", UNIT_TESTS(
        test_set_int_accepts_range_bounds,
        test_set_int_out_of_range_is_rejected_and_keeps_old_value,
        test_set_int_non_integer_is_rejected,
        test_set_unknown_setting_is_rejected,
        test_set_log_level_accepts_only_known_levels,
        test_image_registries_is_validated_as_a_registry_list,
        test_set_listen_requires_host_and_port,
        test_set_string_accepts_any_value,
        test_default_image_is_validated_as_an_image_reference,
        test_every_setting_names_the_commands_it_applies_to,
        test_worker_runtime_accepts_only_docker,
        test_bool_getter_reads_true_and_one,
    ));
    unit_tcase_add(s, "file", UNIT_TESTS(
        test_file_sets_values_skipping_comments_and_blank_lines,
        test_file_unknown_key_error_names_file_and_line,
        test_file_bad_value_error_names_file_line_and_reason,
        test_file_out_of_range_value_is_an_error,
        test_file_line_without_equals_is_an_error,
        test_missing_file_is_an_io_error_naming_it,
    ));
    unit_tcase_add(s, "env", UNIT_TESTS(
        test_env_overrides_file,
        test_env_bad_value_error_names_variable,
        test_env_without_sandbox_variables_changes_nothing,
    ));
    unit_tcase_add(s, "flags", UNIT_TESTS(
        test_flag_lookup_finds_settings_with_and_without_value,
        test_flag_lookup_for_every_table_entry,
        test_flag_lookup_rejects_unknown_flags,
    ));
    unit_tcase_add(s, "print", UNIT_TESTS(
        test_print_lists_every_setting_with_source,
        test_print_masks_worker_token,
        test_print_masks_database_url_credentials,
        test_print_shows_database_url_without_credentials,
        test_print_masks_nats_url_credentials,
    ));
    return s;
}
