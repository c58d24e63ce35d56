// The whole-process floor for `tokenbroker token`: a static C executable that does what the CLI's fast path does
// on the wire and nothing else. It connects to the broker's socket, sends one request line (read from a file, not
// built), reads the answer line and prints the access token found in it, with no JSON parser, runtime or checks.
// `scripts/bench.sh` times it beside `tokenbroker token` against the same daemon with the same harness, so the
// CLI's own start-up and parsing are read as the difference, on whatever host the run lands.
//
//   token_client <socket path> <request file>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s SOCKET REQUEST_FILE\n", argv[0]); return 64; }
    static char request[8192], answer[1 << 16];
    int file = open(argv[2], O_RDONLY | O_CLOEXEC);
    ssize_t length = file < 0 ? -1 : read(file, request, sizeof request - 1);
    if (length <= 0) { perror("request file"); return 66; }
    close(file);
    if (request[length - 1] != '\n') request[length++] = '\n';

    int connection = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un address = {.sun_family = AF_UNIX};
    strncpy(address.sun_path, argv[1], sizeof address.sun_path - 1);
    if (connect(connection, (struct sockaddr *)&address, sizeof address) < 0) { perror("connect"); return 69; }
    if (send(connection, request, (size_t)length, MSG_NOSIGNAL) != length) { perror("send"); return 74; }
    size_t received = 0;
    while (received < sizeof answer - 1) {
        ssize_t count = read(connection, answer + received, sizeof answer - 1 - received);
        if (count <= 0) break;
        received += (size_t)count;
        if (answer[received - 1] == '\n') break;
    }
    answer[received] = 0;
    static const char key[] = "\"accessToken\":\"";
    char *token = strstr(answer, key), *end = token ? strchr(token + sizeof key - 1, '"') : NULL;
    if (!end) { fprintf(stderr, "no access token in the answer\n"); return 76; }
    token += sizeof key - 1;
    *end = '\n';
    return write(1, token, (size_t)(end - token + 1)) == end - token + 1 ? 0 : 74;
}
