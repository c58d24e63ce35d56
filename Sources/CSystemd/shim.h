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
// Wait in line for a well-known name another connection owns, never taking it from that one.
static const uint64_t tb_name_queue = SD_BUS_NAME_QUEUE;

// Asks the user manager for its environment (org.freedesktop.systemd1.Manager's Environment property) without
// waiting: `callback` gets the reply on the bus's thread; tb_read_environment reads its strings.
static inline int tb_ask_manager_environment(sd_bus *bus, sd_bus_message_handler_t callback, void *userdata) {
    return sd_bus_call_method_async(bus, NULL, "org.freedesktop.systemd1", "/org/freedesktop/systemd1",
        "org.freedesktop.DBus.Properties", "Get", callback, userdata, "ss", "org.freedesktop.systemd1.Manager",
        "Environment");
}

// The strings of a Properties.Get reply holding a variant of "as" (NULL-terminated, to be freed by the caller).
static inline int tb_read_environment(sd_bus_message *reply, char ***entries) {
    int result = sd_bus_message_enter_container(reply, 'v', "as");
    if (result < 0) return result;
    return sd_bus_message_read_strv(reply, entries);
}
