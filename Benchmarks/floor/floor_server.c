// The socket floor for the benchmark: a single-threaded epoll server on a Unix socket that answers every
// newline-terminated request with a fixed response of the broker's size and parses nothing. The broker's
// figures are read against this one, measured in the same run on the same machine.
//
//   floor_server <socket path> <response size in bytes, newline included>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s SOCKET RESPONSE_BYTES\n", argv[0]); return 64; }
    size_t size = (size_t)atol(argv[2]);
    char *response = malloc(size);
    memset(response, 'x', size);
    response[size - 1] = '\n';

    int listener = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, argv[1], sizeof address.sun_path - 1);
    unlink(argv[1]);
    if (bind(listener, (struct sockaddr *)&address, sizeof address) < 0 || listen(listener, 256) < 0) {
        perror("bind/listen");
        return 1;
    }
    int poller = epoll_create1(EPOLL_CLOEXEC);
    struct epoll_event event = {.events = EPOLLIN, .data.fd = listener};
    epoll_ctl(poller, EPOLL_CTL_ADD, listener, &event);
    struct epoll_event ready[128];
    char buffer[65536];
    for (;;) {
        int count = epoll_wait(poller, ready, 128, -1);
        for (int index = 0; index < count; index++) {
            int fd = ready[index].data.fd;
            if (fd == listener) {
                int client;
                while ((client = accept4(listener, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0) {
                    struct epoll_event client_event = {.events = EPOLLIN, .data.fd = client};
                    epoll_ctl(poller, EPOLL_CTL_ADD, client, &client_event);
                }
                continue;
            }
            ssize_t got = read(fd, buffer, sizeof buffer);
            if (got <= 0) {
                if (got < 0 && errno == EAGAIN) continue;
                close(fd);
                continue;
            }
            for (ssize_t byte = 0; byte < got; byte++) {
                if (buffer[byte] != '\n') continue;
                size_t sent = 0;
                while (sent < size) {
                    ssize_t written = write(fd, response + sent, size - sent);
                    if (written < 0) {
                        if (errno == EAGAIN) continue;
                        break;
                    }
                    sent += (size_t)written;
                }
            }
        }
    }
}
