/* The commands that need no server: `sandbox context list|show|use` (the
 * config file's named controllers, common/clientcfg.c) and `sandbox
 * completion bash|zsh` (a completion script made from the command table). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "clientcfg.h"
#include "errors.h"
#include "jsonx.h"

/* ---------------------------------------------------------------- context */

int cli_check_context(cli_t *cli, opts_t *o)
{
    if (o->npos == 0) {
        o->pos[o->npos++] = "list";
    }
    const char *sub = o->pos[0];
    if (strcmp(sub, "list") == 0 || strcmp(sub, "ls") == 0 || strcmp(sub, "show") == 0) {
        if (o->npos != 1)
            return cli_usage_error(cli->cmd, "%s takes no argument", sub);
        return 0;
    }
    if (strcmp(sub, "use") == 0) {
        if (o->npos != 2)
            return cli_usage_error(cli->cmd, "use needs a context NAME");
        return 0;
    }
    return cli_usage_error(cli->cmd, "unknown subcommand '%s' (list, show or use)", sub);
}

/* Sets the top's "context = NAME" line of the config file at path, keeping
 * every other line; the file is replaced whole (written aside, renamed). */
static int context_use(cli_t *cli, const char *path, const char *name)
{
    FILE *in = fopen(path, "re");
    if (!in) {
        fprintf(stderr, "sandbox: %s: cannot read %s: %s\n", cli->cmd, path, strerror(errno));
        return EXIT_OP_FAILED;
    }
    struct stat st;
    if (fstat(fileno(in), &st) != 0)
        st.st_mode = 0600;
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, st.st_mode & 0777);
    FILE *out = fd >= 0 ? fdopen(fd, "we") : NULL;
    if (!out) {
        fprintf(stderr, "sandbox: %s: cannot write %s: %s\n", cli->cmd, tmp, strerror(errno));
        if (fd >= 0)
            close(fd);
        fclose(in);
        return EXIT_OP_FAILED;
    }
    /* the new line goes first; an old top-level one is left out */
    fprintf(out, "context = %s\n", name);
    char line[4096];
    bool top = true;
    while (fgets(line, sizeof line, in)) {
        const char *p = line + strspn(line, " \t");
        if (*p == '[')
            top = false;
        if (top && strncmp(p, "context", 7) == 0) {
            const char *q = p + 7;
            while (*q == ' ' || *q == '\t')
                q++;
            if (*q == '=')
                continue;
        }
        fputs(line, out);
    }
    bool failed = ferror(in) != 0;
    fclose(in);
    failed = fflush(out) != 0 || fsync(fileno(out)) != 0 || failed;
    failed = fclose(out) != 0 || failed;
    if (failed || rename(tmp, path) != 0) {
        fprintf(stderr, "sandbox: %s: cannot replace %s: %s\n", cli->cmd, path, strerror(errno));
        unlink(tmp);
        return EXIT_OP_FAILED;
    }
    return EXIT_OK;
}

int cli_cmd_context(cli_t *cli, opts_t *o)
{
    const char *sub = o->pos[0];
    char err[512];
    client_context_t *v = NULL;
    int n = 0;
    char *current = NULL, *path = NULL;
    int rc = EXIT_OK;
    if (strcmp(sub, "show") == 0) {
        /* what a command with these flags and this environment would use */
        client_config_t cc;
        if (client_config_resolve(o->url, o->token, o->context, &cc, err, sizeof err) < 0) {
            client_config_release(&cc);
            return cli_usage_error(cli->cmd, "%s", err);
        }
        for (int i = 0; i < 2; i++)
            if (cc.warnings[i][0])
                fprintf(stderr, "sandbox: warning: %s\n", cc.warnings[i]);
        if (cli->json) {
            json_object *j = json_object_new_object();
            jsonx_add(j, "context", cc.context ? json_object_new_string(cc.context) : NULL);
            jsonx_add_str(j, "url", cc.url);
            jsonx_add(j, "token", json_object_new_boolean(cc.token != NULL));
            jsonx_add(j, "ca_file", cc.ca_file ? json_object_new_string(cc.ca_file) : NULL);
            jsonx_add(j, "config_file", cc.path ? json_object_new_string(cc.path) : NULL);
            cli_print_json(j);
            json_object_put(j);
        } else {
            printf("context: %s\nurl: %s\ntoken: %s\nca_file: %s\nconfig_file: %s\n", cc.context ? cc.context : "-",
                   cc.url, cc.token ? "set (not shown)" : "none", cc.ca_file ? cc.ca_file : "-",
                   cc.path ? cc.path : "-");
        }
        client_config_release(&cc);
        return EXIT_OK;
    }
    if (client_config_contexts(o->context, &v, &n, &current, &path, err, sizeof err) < 0) {
        rc = cli_usage_error(cli->cmd, "%s", err);
        goto done;
    }
    if (strcmp(sub, "use") == 0) {
        const char *name = o->pos[1];
        int i = 0;
        while (i < n && strcmp(v[i].name, name) != 0)
            i++;
        if (i == n) {
            fprintf(stderr, "sandbox: %s: no context '%s' in %s (add a [context %s] section with url = and token = "
                            "lines; 'sandbox context list' shows what there is)\n",
                    cli->cmd, name, path, name);
            rc = EXIT_OP_FAILED;
            goto done;
        }
        rc = context_use(cli, path, name);
        if (rc == EXIT_OK && !o->quiet)
            printf("context %s (%s) is now the default in %s\n", name, v[i].url ? v[i].url : "no url", path);
        goto done;
    }
    if (cli->json) {
        json_object *arr = json_object_new_array();
        for (int i = 0; i < n; i++) {
            json_object *j = json_object_new_object();
            jsonx_add_str(j, "name", v[i].name);
            jsonx_add(j, "url", v[i].url ? json_object_new_string(v[i].url) : NULL);
            jsonx_add(j, "token", json_object_new_boolean(v[i].has_token));
            jsonx_add(j, "current", json_object_new_boolean(current && strcmp(current, v[i].name) == 0));
            json_object_array_add(arr, j);
        }
        json_object *top = json_object_new_object();
        jsonx_add(top, "contexts", arr);
        jsonx_add(top, "current", current ? json_object_new_string(current) : NULL);
        jsonx_add_str(top, "config_file", path);
        cli_print_json(top);
        json_object_put(top);
    } else if (o->quiet) {
        for (int i = 0; i < n; i++)
            printf("%s\n", v[i].name);
    } else {
        if (n == 0)
            fprintf(stderr, "sandbox: no contexts in %s (a [context NAME] section with url = and token = lines "
                            "makes one; docs/client-setup.md#contexts)\n", path);
        else
            printf("%-1s %-24s %-44s %s\n", "", "NAME", "URL", "TOKEN");
        for (int i = 0; i < n; i++)
            printf("%-1s %-24s %-44s %s\n", current && strcmp(current, v[i].name) == 0 ? "*" : "", v[i].name,
                   v[i].url ? v[i].url : "-", v[i].has_token ? "set" : "none");
    }
done:
    client_contexts_free(v, n);
    free(current);
    free(path);
    return rc;
}

/* ---------------------------------------------------------------- completion */

int cli_check_completion(cli_t *cli, opts_t *o)
{
    if (o->npos != 1 || (strcmp(o->pos[0], "bash") != 0 && strcmp(o->pos[0], "zsh") != 0))
        return cli_usage_error(cli->cmd, "name a shell: bash or zsh");
    return 0;
}

/* Subcommands of the commands that group several. */
static const char *subcommands(const char *cmd)
{
    static const char *const t[][2] = {
        { "tenants", "create list get update delete" }, { "tokens", "create list revoke" },
        { "workers", "list drain resume" },              { "pools", "list create get delete" },
        { "snapshots", "list get delete copy" },         { "templates", "build builds cancel list get delete logs" },
        { "context", "list show use" },                  { "secrets", "create list delete" },
        { "completion", "bash zsh" },
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (strcmp(t[i][0], cmd) == 0)
            return t[i][1];
    return NULL;
}

/* The commands whose first argument is a sandbox id. */
static bool takes_sandbox(const char *cmd)
{
    static const char *const t[] = { "exec", "get", "delete", "rm", "extend", "pause", "resume", "snapshot",
                                     "network", "fork", "share", "routes", "unshare", "logs", "shell", NULL };
    for (int i = 0; t[i]; i++)
        if (strcmp(t[i], cmd) == 0)
            return true;
    return false;
}

static void print_flags(const flag_def_t *f, bool values)
{
    for (; f && f->name; f++) {
        if ((f->kind != F_BOOL) != values)
            continue;
        printf(" %s", f->name);
        if (f->short_name)
            printf(" %s", f->short_name);
    }
}

int cli_cmd_completion(cli_t *cli, opts_t *o)
{
    (void)cli;
    size_t n;
    const command_t *cmds = cli_commands(&n);
    if (strcmp(o->pos[0], "zsh") == 0)
        printf("#compdef sandbox\n"
               "# zsh completion for sandbox: eval \"$(sandbox completion zsh)\" in ~/.zshrc\n"
               "autoload -U +X bashcompinit && bashcompinit\n");
    else
        printf("# bash completion for sandbox: eval \"$(sandbox completion bash)\" in ~/.bashrc\n");
    printf("_sandbox_cli() {\n"
           "  # the global flags given so far go with the calls that list ids\n"
           "  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} cmd= i g=() npos=0\n"
           "  for ((i = 1; i < COMP_CWORD; i++)); do\n"
           "    case ${COMP_WORDS[i]} in\n"
           "      --url|--token|--ca-file|--context) g+=(\"${COMP_WORDS[i]}\" \"${COMP_WORDS[i+1]}\"); ((i++)) ;;\n"
           "      --url=*|--token=*|--ca-file=*|--context=*) g+=(\"${COMP_WORDS[i]}\") ;;\n"
           "      --) [ -n \"$cmd\" ] && return 0 ;;\n"
           "      -*) ;;\n"
           "      *) if [ -z \"$cmd\" ]; then cmd=${COMP_WORDS[i]}; else npos=$((npos + 1)); fi ;;\n"
           "    esac\n"
           "  done\n"
           "  case $prev in\n"
           "    --context) COMPREPLY=($(compgen -W \"$(sandbox context list -q 2>/dev/null)\" -- \"$cur\")); return 0 ;;\n"
           "    --image) COMPREPLY=($(compgen -W \"$(sandbox \"${g[@]}\" images -q 2>/dev/null)\" -- \"$cur\")); return 0 ;;\n"
           "    --from) COMPREPLY=($(compgen -W \"$(sandbox \"${g[@]}\" snapshots list -q 2>/dev/null)\" -- \"$cur\")); return 0 ;;\n"
           "    --template) COMPREPLY=($(compgen -W \"$(sandbox \"${g[@]}\" templates list -q 2>/dev/null)\" -- \"$cur\")); return 0 ;;\n"
           "    -f|--file) COMPREPLY=($(compgen -f -- \"$cur\")); return 0 ;;\n"
           "    --ca-file) COMPREPLY=($(compgen -f -- \"$cur\")); return 0 ;;\n"
           "  esac\n"
           "  local values=\"--url --token --ca-file --context\" flags=\"--url --token --ca-file --context --help\" subs=\n"
           "  case $cmd in\n"
           "    '') COMPREPLY=($(compgen -W \"");
    for (size_t i = 0; i < n; i++)
        printf("%s%s%s%s", i ? " " : "", cmds[i].name, cmds[i].alias ? " " : "", cmds[i].alias ? cmds[i].alias : "");
    printf(" help --url --token --ca-file --context --help --version\" -- \"$cur\")); return 0 ;;\n");
    for (size_t i = 0; i < n; i++) {
        printf("    %s%s%s)", cmds[i].name, cmds[i].alias ? "|" : "", cmds[i].alias ? cmds[i].alias : "");
        printf(" values=\"$values");
        print_flags(cmds[i].flags, true);
        printf("\"; flags=\"$flags");
        print_flags(cmds[i].flags, false);
        print_flags(cmds[i].flags, true);
        printf("\"");
        const char *subs = subcommands(cmds[i].name);
        if (subs)
            printf("; subs=\"%s\"", subs);
        printf(" ;;\n");
    }
    printf("    help) COMPREPLY=($(compgen -W \"");
    for (size_t i = 0; i < n; i++)
        printf("%s%s", i ? " " : "", cmds[i].name);
    printf("\" -- \"$cur\")); return 0 ;;\n"
           "  esac\n"
           "  # a flag that takes a value: nothing to offer for it\n"
           "  case \" $values \" in *\" $prev \"*) [ \"${prev#-}\" != \"$prev\" ] && return 0 ;; esac\n"
           "  if [[ $cur == -* ]]; then COMPREPLY=($(compgen -W \"$flags\" -- \"$cur\")); return 0; fi\n"
           "  if [ -n \"$subs\" ] && [ \"$npos\" -eq 0 ]; then COMPREPLY=($(compgen -W \"$subs\" -- \"$cur\")); return 0; fi\n"
           "  case $cmd in\n");
    printf("    ");
    bool first = true;
    for (size_t i = 0; i < n; i++)
        if (takes_sandbox(cmds[i].name) || (cmds[i].alias && takes_sandbox(cmds[i].alias))) {
            printf("%s%s%s%s", first ? "" : "|", cmds[i].name, cmds[i].alias ? "|" : "",
                   cmds[i].alias ? cmds[i].alias : "");
            first = false;
        }
    printf(")\n"
           "      [ \"$npos\" -eq 0 ] || [ \"$cmd\" = delete ] || [ \"$cmd\" = rm ] || return 0\n"
           "      COMPREPLY=($(compgen -W \"$(sandbox \"${g[@]}\" list -q 2>/dev/null)\" -- \"$cur\")) ;;\n"
           "    cp)\n"
           "      # SANDBOX: for the sandbox end, local paths otherwise\n"
           "      COMPREPLY=($(compgen -f -- \"$cur\") $(compgen -W \"$(sandbox \"${g[@]}\" list -q 2>/dev/null | sed 's/$/:/')\" -- \"$cur\"))\n"
           "      compopt -o nospace 2>/dev/null ;;\n"
           "    snapshots) [ \"$npos\" -ge 1 ] && COMPREPLY=($(compgen -W \"$(sandbox \"${g[@]}\" snapshots list -q 2>/dev/null)\" -- \"$cur\")) ;;\n"
           "    templates)\n"
           "      # get and delete: a template's name; build: NAME, then the CONTEXT directory\n"
           "      local sub= j\n"
           "      for ((j = 1; j < COMP_CWORD; j++)); do [ \"${COMP_WORDS[j]}\" = templates ] && { sub=${COMP_WORDS[j+1]}; break; }; done\n"
           "      case $sub in\n"
           "        get|delete) [ \"$npos\" -eq 1 ] && COMPREPLY=($(compgen -W \"$(sandbox \"${g[@]}\" templates list -q 2>/dev/null)\" -- \"$cur\")) ;;\n"
           "        build) [ \"$npos\" -ge 2 ] && COMPREPLY=($(compgen -d -- \"$cur\")) ;;\n"
           "      esac ;;\n"
           "    context) [ \"$npos\" -eq 1 ] && COMPREPLY=($(compgen -W \"$(sandbox context list -q 2>/dev/null)\" -- \"$cur\")) ;;\n"
           "    wait|output|cancel|operation|op) ;;\n"
           "  esac\n"
           "  return 0\n"
           "}\n"
           "complete -F _sandbox_cli sandbox\n");
    return EXIT_OK;
}
