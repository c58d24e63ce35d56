#pragma once
// The key stores' libraries are opened on first use, not linked: a daemon that never asks the Secret Service or a
// TPM (no session bus, no TPM, a plain key file) never maps libsecret, GLib or tpm2-tss, and one on a machine without
// them still runs, with those stores unavailable. Each store lists the functions it calls in an X-macro; its table
// holds their addresses, and the file renames each call to go through the table.
#include <stdbool.h>
#include <stddef.h>

/// Opens the library soname into *library (it stays open for the life of the process) and resolves count symbols:
/// names[i] into *slots[i]. On failure sets *message to a malloc'd sentence naming what is missing (or NULL without
/// memory), and leaves nothing open and no slot set.
bool tb_library_open(const char *soname, const char *const *names, void **const *slots, size_t count, void **library,
                     char **message);

/// Clears the count slots and closes *library (if open): for a store whose later library failed to open.
void tb_library_close(void **library, void **const *slots, size_t count);

/// For a store's X-macro of function names: a field of its table holding the function's address (of the type the
/// library's own header declares), the name as a string, and the field's address in the table the file names
/// TB_LIBRARY_TABLE.
#define TB_LIBRARY_FIELD(name) __typeof__(name) *name;
#define TB_LIBRARY_NAME(name) #name,
#define TB_LIBRARY_SLOT(name) (void **)&TB_LIBRARY_TABLE.name,

/// tb_library_open for the functions of one X-macro, into TB_LIBRARY_TABLE.
#define TB_LIBRARY_OPEN(soname, FUNCTIONS, library, message)                                                           \
    ({                                                                                                                 \
        static const char *const names_[] = {FUNCTIONS(TB_LIBRARY_NAME)};                                             \
        void **const slots_[] = {FUNCTIONS(TB_LIBRARY_SLOT)};                                                          \
        tb_library_open(soname, names_, slots_, sizeof names_ / sizeof *names_, library, message);                     \
    })

/// tb_library_close for the functions of one X-macro, in TB_LIBRARY_TABLE.
#define TB_LIBRARY_CLOSE(FUNCTIONS, library)                                                                           \
    ({                                                                                                                 \
        void **const slots_[] = {FUNCTIONS(TB_LIBRARY_SLOT)};                                                          \
        tb_library_close(library, slots_, sizeof slots_ / sizeof *slots_);                                             \
    })
