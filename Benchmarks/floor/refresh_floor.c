// The refresh floor: the least any broker does for a silent request that refreshes, measured on this machine. A
// single-threaded server on a Unix socket that answers each newline-terminated request by POSTing a refresh-token
// grant to the provider's token endpoint over one kept-alive TCP connection, reading the answer (Content-Length),
// keeping the refresh token the provider rotated to, and writing a fixed line of the broker's answer size. It
// checks no signature, keeps no cache and writes nothing to disk: the broker's share of a refresh is read against
// this one's, measured in the same run against the same provider.
//
//   refresh_floor <socket> <provider port> <token path> <form> <refresh token> <answer bytes>
//
// <form> is the grant's url-encoded form without its refresh_token (client_id, grant_type, scope); the refresh
// token is appended to it for each request.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static char refresh_token[4096];

static int write_all(int fd, const char *bytes, size_t size) {
    while (size > 0) {
        ssize_t written = write(fd, bytes, size);
        if (written <= 0) return -1;
        bytes += written;
        size -= (size_t)written;
    }
    return 0;
}

static int connect_provider(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((unsigned short)port)};
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (struct sockaddr *)&address, sizeof address) < 0) {
        perror("connect to the provider");
        exit(1);
    }
    return fd;
}

// One exchange with the provider: sends the grant, reads the whole answer into `answer`, keeps a rotated refresh
// token. Returns 0 on a 200.
static int redeem(int provider, int port, const char *path, const char *form, char *answer, size_t capacity) {
    static char request[16384];
    char body[8192];
    int body_size = snprintf(body, sizeof body, "%s&refresh_token=%s", form, refresh_token);
    int size = snprintf(request, sizeof request,
                        "POST %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nContent-Type: application/x-www-form-urlencoded"
                        "\r\nContent-Length: %d\r\n\r\n%s",
                        path, port, body_size, body);
    if (write_all(provider, request, (size_t)size) < 0) return -1;
    size_t have = 0;
    char *end = NULL;
    while (!end) {
        ssize_t got = read(provider, answer + have, capacity - 1 - have);
        if (got <= 0) return -1;
        have += (size_t)got;
        answer[have] = 0;
        end = strstr(answer, "\r\n\r\n");
    }
    const char *length = strstr(answer, "Content-Length: ");
    if (!length || length > end) return -1;
    size_t total = (size_t)(end + 4 - answer) + (size_t)atol(length + 16);
    if (total >= capacity) return -1;
    while (have < total) {
        ssize_t got = read(provider, answer + have, total - have);
        if (got <= 0) return -1;
        have += (size_t)got;
    }
    answer[have] = 0;
    const char *rotated = strstr(end, "\"refresh_token\":\"");
    if (rotated) {
        rotated += 17;
        size_t token_size = strcspn(rotated, "\"");
        if (token_size < sizeof refresh_token) {
            memcpy(refresh_token, rotated, token_size);
            refresh_token[token_size] = 0;
        }
    }
    return strncmp(answer, "HTTP/1.1 200", 12) == 0 ? 0 : -1;
}

int main(int argc, char **argv) {
    if (argc != 7) {
        fprintf(stderr, "usage: %s SOCKET PROVIDER_PORT TOKEN_PATH FORM REFRESH_TOKEN ANSWER_BYTES\n", argv[0]);
        return 64;
    }
    int port = atoi(argv[2]);
    const char *path = argv[3], *form = argv[4];
    snprintf(refresh_token, sizeof refresh_token, "%s", argv[5]);
    // An answer the benchmark's client takes for a refresh, padded to the broker's size.
    size_t size = (size_t)atol(argv[6]);
    const char *head = "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"tokenSource\":\"identityProvider\",\"pad\":\"";
    char *line = malloc(size + 1);
    memset(line, 'x', size);
    memcpy(line, head, strlen(head));
    memcpy(line + size - 4, "\"}}\n", 4);
    static char answer[1 << 20];

    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, argv[1], sizeof address.sun_path - 1);
    unlink(argv[1]);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) < 0 || listen(listener, 16) < 0) {
        perror("bind/listen");
        return 1;
    }
    int provider = connect_provider(port);
    char buffer[65536];
    for (;;) {
        int client = accept4(listener, NULL, NULL, SOCK_CLOEXEC);
        if (client < 0) continue;
        ssize_t got;
        while ((got = read(client, buffer, sizeof buffer)) > 0) {
            for (ssize_t byte = 0; byte < got; byte++) {
                if (buffer[byte] != '\n') continue;
                if (redeem(provider, port, path, form, answer, sizeof answer) != 0) {
                    // The status line only: a body may hold tokens.
                    fprintf(stderr, "the refresh failed: %.*s\n", (int)strcspn(answer, "\r\n"), answer);
                    return 1;
                }
                if (write_all(client, line, size) < 0) break;
            }
        }
        close(client);
    }
}
