#define _GNU_SOURCE // asprintf
#include "Library.h"

#include <dlfcn.h>
#include <stdio.h>

bool tb_library_open(const char *soname, const char *const *names, void **const *slots, size_t count,
                     char **message) {
    void *library = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
    if (library == NULL) {
        if (asprintf(message, "%s is not installed or does not load: %s", soname, dlerror()) < 0) *message = NULL;
        return false;
    }
    for (size_t index = 0; index < count; index++) {
        *slots[index] = dlsym(library, names[index]);
        if (*slots[index] == NULL) {
            if (asprintf(message, "%s has no %s: another version than the one tokenbroker was built for is installed",
                         soname, names[index]) < 0)
                *message = NULL;
            return false;
        }
    }
    return true;
}
