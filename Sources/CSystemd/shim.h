#pragma once
// libsystemd for Swift. sd_journal_sendv() stays a plain function (no CODE_FILE= macro wrapper): the journald
// log handler passes CODE_FILE, CODE_LINE and CODE_FUNC itself, from swift-log's event.
#define SD_JOURNAL_SUPPRESS_LOCATION 1
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>
#include <sys/uio.h>
#include <sys/types.h>
