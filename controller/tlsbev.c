/* OpenSSL bufferevents: accepting, connecting with verification, half-close. */
#include "tlsbev.h"
#include "tls_openssl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/bufferevent_ssl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <unistd.h>

struct bufferevent *tls_bev_accepting(struct event_base *base, SSL_CTX *ctx, evutil_socket_t fd)
{
    SSL *ssl = SSL_new(ctx);
    if (!ssl)
        return NULL;
    struct bufferevent *bev =
        bufferevent_openssl_socket_new(base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        SSL_free(ssl);
        return NULL;
    }
    /* Clients that close without a close_notify (most HTTP clients) end the
     * connection with EOF, not an error. */
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

struct bufferevent *tls_bev_connect(struct event_base *base, SSL_CTX *ctx, const struct sockaddr *sa, int salen)
{
    char ip[INET6_ADDRSTRLEN];
    const void *a = sa->sa_family == AF_INET6 ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
                                              : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
    if ((sa->sa_family != AF_INET && sa->sa_family != AF_INET6) || !inet_ntop(sa->sa_family, a, ip, sizeof ip))
        return NULL;
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return NULL;
    SSL *ssl = NULL;
    if ((connect(fd, sa, (socklen_t)salen) < 0 && errno != EINPROGRESS) || !(ssl = SSL_new(ctx)) ||
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), ip) != 1) {
        if (ssl)
            SSL_free(ssl);
        close(fd);
        ERR_clear_error();
        return NULL;
    }
    struct bufferevent *bev =
        bufferevent_openssl_socket_new(base, fd, ssl, BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        SSL_free(ssl);
        close(fd);
        return NULL;
    }
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

void tls_bev_failure(struct bufferevent *bev, char *buf, size_t len)
{
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    if (len)
        buf[0] = '\0';
    if (!ssl)
        return;
    if (SSL_get_verify_result(ssl) != X509_V_OK) {
        tls_failure_text(ssl, buf, len);
        return;
    }
    /* An OpenSSL error with a reason is TLS's; without one (a refused or
     * reset connection) it is the socket's, and the caller says so. */
    unsigned long e = bufferevent_get_openssl_error(bev);
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    if (r)
        snprintf(buf, len, "%s", r);
}

void tls_bev_shutdown_write(struct bufferevent *bev)
{
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    if (ssl) {
        /* Writes the close_notify straight to the socket (a few bytes into an
         * emptied send buffer); a failure only leaves the EOF below. */
        if (SSL_shutdown(ssl) < 0)
            ERR_clear_error();
    }
    shutdown(bufferevent_getfd(bev), SHUT_WR);
}
