#pragma once
// libsystemd for Swift. sd_journal_sendv() stays a plain function (no CODE_FILE= macro wrapper): the journald
// log handler passes CODE_FILE, CODE_LINE and CODE_FUNC itself, from swift-log's event.
#define SD_JOURNAL_SUPPRESS_LOCATION 1
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>
#include <sys/uio.h>
#include <sys/types.h>
#include <systemd/sd-bus.h>
#include <poll.h>
#include <sys/eventfd.h>

// The sd-bus credential bits, as plain constants (C's anonymous 64-bit enum does not import cleanly).
static const uint64_t tb_creds_caller = SD_BUS_CREDS_PID | SD_BUS_CREDS_UID | SD_BUS_CREDS_EUID | SD_BUS_CREDS_EGID
    | SD_BUS_CREDS_EXE | SD_BUS_CREDS_AUGMENT;
static const uint64_t tb_creds_owner = SD_BUS_CREDS_PID | SD_BUS_CREDS_EXE | SD_BUS_CREDS_COMM
    | SD_BUS_CREDS_UNIQUE_NAME | SD_BUS_CREDS_AUGMENT;
