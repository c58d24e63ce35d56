// The cache key as one item in the user's Secret Service, through libsecret's synchronous API. No main loop runs in
// the daemon: each call works on its own thread-default GMainContext, opens a fresh SecretService proxy (never
// libsecret's process-wide singleton, which goes stale when the keyring daemon restarts) and drops everything again.
#define _GNU_SOURCE // vasprintf
#include "CKeyStores.h"
#include "Library.h"
#include <libsecret/secret.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// libsecret and the GLib under it, opened on the first call that finds a session bus (Library.h).
#define SECRET_SERVICE_FUNCTIONS(X) \
    X(g_bus_get_sync) X(g_cancellable_cancel) X(g_cancellable_new) X(g_cond_clear) X(g_cond_init) X(g_cond_signal) \
    X(g_cond_wait_until) X(g_dbus_connection_set_exit_on_close) X(g_dbus_error_quark) \
    X(g_dbus_error_strip_remote_error) X(g_dbus_proxy_get_object_path) X(g_dbus_proxy_get_type) X(g_error_free) \
    X(g_error_matches) X(g_get_monotonic_time) X(g_hash_table_insert) X(g_hash_table_new) \
    X(g_hash_table_unref) X(g_io_error_quark) X(g_list_free) X(g_list_free_full) X(g_list_prepend) \
    X(g_main_context_iteration) X(g_main_context_new) X(g_main_context_pop_thread_default) \
    X(g_main_context_push_thread_default) X(g_main_context_unref) X(g_mutex_clear) X(g_mutex_init) X(g_mutex_lock) \
    X(g_mutex_unlock) X(g_object_unref) X(g_str_equal) X(g_str_hash) X(g_thread_join) \
    X(g_thread_try_new) X(g_type_check_instance_cast) X(secret_collection_for_alias_sync) \
    X(secret_collection_get_locked) X(secret_error_get_quark) X(secret_item_create_sync) X(secret_item_delete_sync) \
    X(secret_item_get_locked) X(secret_item_get_secret) X(secret_item_load_secret_sync) X(secret_service_get_type) \
    X(secret_service_open_sync) X(secret_service_search_sync) X(secret_service_unlock_sync) X(secret_value_get) \
    X(secret_value_new) X(secret_value_unref)

/// The addresses of SECRET_SERVICE_FUNCTIONS, once secret_api_load has run.
static struct {
    SECRET_SERVICE_FUNCTIONS(TB_LIBRARY_FIELD)
} secret_api;
#define TB_LIBRARY_TABLE secret_api
static pthread_once_t secret_api_once = PTHREAD_ONCE_INIT;
/// Why libsecret cannot be used (malloc'd, kept), or NULL once secret_api holds every function.
static char *secret_api_problem;
static bool secret_api_failed;

static void secret_api_load(void) {
    void *library;
    secret_api_failed = !TB_LIBRARY_OPEN("libsecret-1.so.0", SECRET_SERVICE_FUNCTIONS, &library, &secret_api_problem);
}

// From here on, each call of a library function goes through the table.
#define g_bus_get_sync secret_api.g_bus_get_sync
#define g_cancellable_cancel secret_api.g_cancellable_cancel
#define g_cancellable_new secret_api.g_cancellable_new
#define g_cond_clear secret_api.g_cond_clear
#define g_cond_init secret_api.g_cond_init
#define g_cond_signal secret_api.g_cond_signal
#define g_cond_wait_until secret_api.g_cond_wait_until
#define g_dbus_connection_set_exit_on_close secret_api.g_dbus_connection_set_exit_on_close
#define g_dbus_error_quark secret_api.g_dbus_error_quark
#define g_dbus_error_strip_remote_error secret_api.g_dbus_error_strip_remote_error
#define g_dbus_proxy_get_object_path secret_api.g_dbus_proxy_get_object_path
#define g_dbus_proxy_get_type secret_api.g_dbus_proxy_get_type
#define g_error_free secret_api.g_error_free
#define g_error_matches secret_api.g_error_matches
#define g_get_monotonic_time secret_api.g_get_monotonic_time
#define g_hash_table_insert secret_api.g_hash_table_insert
#define g_hash_table_new secret_api.g_hash_table_new
#define g_hash_table_unref secret_api.g_hash_table_unref
#define g_io_error_quark secret_api.g_io_error_quark
#define g_list_free secret_api.g_list_free
#define g_list_free_full secret_api.g_list_free_full
#define g_list_prepend secret_api.g_list_prepend
#define g_main_context_iteration secret_api.g_main_context_iteration
#define g_main_context_new secret_api.g_main_context_new
#define g_main_context_pop_thread_default secret_api.g_main_context_pop_thread_default
#define g_main_context_push_thread_default secret_api.g_main_context_push_thread_default
#define g_main_context_unref secret_api.g_main_context_unref
#define g_mutex_clear secret_api.g_mutex_clear
#define g_mutex_init secret_api.g_mutex_init
#define g_mutex_lock secret_api.g_mutex_lock
#define g_mutex_unlock secret_api.g_mutex_unlock
#define g_object_unref secret_api.g_object_unref
#undef g_str_equal // GLib 2.74 also has it as a macro for calls; attributes_for takes its address
#define g_str_equal secret_api.g_str_equal
#define g_str_hash secret_api.g_str_hash
#define g_thread_join secret_api.g_thread_join
#define g_thread_try_new secret_api.g_thread_try_new
#define g_type_check_instance_cast secret_api.g_type_check_instance_cast
#define secret_collection_for_alias_sync secret_api.secret_collection_for_alias_sync
#define secret_collection_get_locked secret_api.secret_collection_get_locked
#define secret_error_get_quark secret_api.secret_error_get_quark
#define secret_item_create_sync secret_api.secret_item_create_sync
#define secret_item_delete_sync secret_api.secret_item_delete_sync
#define secret_item_get_locked secret_api.secret_item_get_locked
#define secret_item_get_secret secret_api.secret_item_get_secret
#define secret_item_load_secret_sync secret_api.secret_item_load_secret_sync
#define secret_service_get_type secret_api.secret_service_get_type
#define secret_service_open_sync secret_api.secret_service_open_sync
#define secret_service_search_sync secret_api.secret_service_search_sync
#define secret_service_unlock_sync secret_api.secret_service_unlock_sync
#define secret_value_get secret_api.secret_value_get
#define secret_value_new secret_api.secret_value_new
#define secret_value_unref secret_api.secret_value_unref

static const SecretSchema cache_key_schema = {
    .name = "org.tokenbroker.CacheKey",
    .flags = SECRET_SCHEMA_NONE,
    .attributes = {{"cache", SECRET_SCHEMA_ATTRIBUTE_STRING}, {NULL, 0}},
};

/// One call: its deadline (a thread that cancels `cancellable` after timeout_ms), its context and its proxies.
typedef struct {
    int timeout_ms;
    GMainContext *context;
    GCancellable *cancellable;
    GMutex mutex;
    GCond cond;
    bool finished;
    GThread *timer;
    GDBusConnection *bus;
    SecretService *service;
} Call;

/// Sets *message to a malloc'd sentence (never key bytes) and returns status. (libc only: it also reports that
/// libsecret is not there.)
G_GNUC_PRINTF(3, 4) static tb_key_status fail(char **message, tb_key_status status, const char *format, ...) {
    if (message != NULL) {
        va_list arguments;
        va_start(arguments, format);
        if (vasprintf(message, format, arguments) < 0) *message = NULL;
        va_end(arguments);
    }
    return status;
}

/// Maps a GLib error to a status and its message, and clears it; `doing` says what failed.
static tb_key_status fail_with(const Call *call, char **message, GError **error_pointer, const char *doing) {
    GError *error = g_steal_pointer(error_pointer);
    tb_key_status status;
    g_dbus_error_strip_remote_error(error);
    if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED)) {
        status = fail(message, TB_KEY_UNAVAILABLE, "the Secret Service did not answer within %d ms", call->timeout_ms);
    } else if (g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_SERVICE_UNKNOWN) ||
               g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_NAME_HAS_NO_OWNER) ||
               g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_NO_REPLY) ||
               g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_SPAWN_CHILD_EXITED) ||
               g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_SPAWN_EXEC_FAILED) ||
               g_error_matches(error, G_DBUS_ERROR, G_DBUS_ERROR_SPAWN_FAILED)) {
        status = fail(message, TB_KEY_UNAVAILABLE, "no Secret Service (org.freedesktop.secrets) on the session bus: %s",
                      error->message);
    } else if (g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CLOSED)) {
        status = fail(message, TB_KEY_UNAVAILABLE, "the session bus went away: %s", error->message);
    } else if (g_error_matches(error, SECRET_ERROR, SECRET_ERROR_IS_LOCKED)) {
        status = fail(message, TB_KEY_LOCKED, "%s: %s", doing, error->message);
    } else {
        status = fail(message, TB_KEY_FAILED, "%s: %s", doing, error->message);
    }
    g_error_free(error);
    return status;
}

/// Whether a session bus is there to connect to, checked without GLib (which would autolaunch one with dbus-launch,
/// and is not loaded yet).
static bool session_bus_exists(void) {
    const char *address = getenv("DBUS_SESSION_BUS_ADDRESS");
    if (address != NULL && address[0] != '\0') return strstr(address, "autolaunch:") == NULL;
    const char *runtime = getenv("XDG_RUNTIME_DIR");
    if (runtime == NULL || runtime[0] != '/') return false;
    char path[4096];
    if (snprintf(path, sizeof path, "%s/bus", runtime) >= (int)sizeof path) return false;
    struct stat status;
    return stat(path, &status) == 0 && S_ISSOCK(status.st_mode) && status.st_uid == geteuid();
}

/// The timer thread: cancels the call when timeout_ms pass before it finishes.
static gpointer run_timer(gpointer data) {
    Call *call = data;
    gint64 deadline = g_get_monotonic_time() + (gint64)call->timeout_ms * G_TIME_SPAN_MILLISECOND;
    bool expired = false;
    g_mutex_lock(&call->mutex);
    while (!call->finished && !expired) expired = !g_cond_wait_until(&call->cond, &call->mutex, deadline);
    expired = expired && !call->finished;
    g_mutex_unlock(&call->mutex);
    if (expired) g_cancellable_cancel(call->cancellable);
    return NULL;
}

/// Starts a call: checks for a bus, loads libsecret, starts the timer, connects and opens an encrypted session.
/// call_end follows whatever this returns.
static tb_key_status call_begin(Call *call, int timeout_ms, char **message) {
    *call = (Call){.timeout_ms = timeout_ms > 0 ? timeout_ms : 1};
    if (!session_bus_exists())
        return fail(message, TB_KEY_UNAVAILABLE,
                    "no session bus: neither DBUS_SESSION_BUS_ADDRESS is set nor is $XDG_RUNTIME_DIR/bus a socket");
    pthread_once(&secret_api_once, secret_api_load);
    if (secret_api_failed)
        return fail(message, TB_KEY_UNAVAILABLE, "%s",
                    secret_api_problem != NULL ? secret_api_problem : "libsecret-1.so.0 does not load");
    call->context = g_main_context_new();
    g_main_context_push_thread_default(call->context);
    call->cancellable = g_cancellable_new();
    g_mutex_init(&call->mutex);
    g_cond_init(&call->cond);
    GError *error = NULL;
    call->timer = g_thread_try_new("tb-secret-timer", run_timer, call, &error);
    if (call->timer == NULL) return fail_with(call, message, &error, "cannot start the timer thread");
    call->bus = g_bus_get_sync(G_BUS_TYPE_SESSION, call->cancellable, &error);
    if (call->bus == NULL && g_error_matches(error, G_IO_ERROR, G_IO_ERROR_CANCELLED))
        return fail_with(call, message, &error, "cannot connect to the session bus");
    if (call->bus == NULL) {
        tb_key_status status = fail(message, TB_KEY_UNAVAILABLE, "cannot connect to the session bus: %s",
                                    error->message);
        g_error_free(error);
        return status;
    }
    // The shared connection would raise SIGTERM in the daemon when the bus goes away.
    g_dbus_connection_set_exit_on_close(call->bus, FALSE);
    call->service = secret_service_open_sync(SECRET_TYPE_SERVICE, NULL, SECRET_SERVICE_OPEN_SESSION,
                                             call->cancellable, &error);
    if (call->service == NULL) return fail_with(call, message, &error, "cannot open a session with the Secret Service");
    return TB_KEY_OK;
}

/// Ends a call: stops the timer, releases the proxies (so the bus connection goes too), drains the context.
static void call_end(Call *call) {
    if (call->context == NULL) return;
    if (call->timer != NULL) {
        g_mutex_lock(&call->mutex);
        call->finished = true;
        g_cond_signal(&call->cond);
        g_mutex_unlock(&call->mutex);
        g_thread_join(call->timer);
    }
    g_clear_object(&call->service);
    g_clear_object(&call->bus);
    g_clear_object(&call->cancellable);
    for (int round = 0; round < 100 && g_main_context_iteration(call->context, FALSE); round++) {}
    g_main_context_pop_thread_default(call->context);
    g_main_context_unref(call->context);
    g_mutex_clear(&call->mutex);
    g_cond_clear(&call->cond);
}

/// The default collection, or NULL (with *error unset) when the service has none.
static SecretCollection *default_collection(Call *call, GError **error) {
    return secret_collection_for_alias_sync(call->service, SECRET_COLLECTION_DEFAULT, SECRET_COLLECTION_NONE,
                                            call->cancellable, error);
}

/// The search attributes {"cache": cache_id} (libsecret adds xdg:schema); the table owns no strings.
static GHashTable *attributes_for(const char *cache_id) {
    GHashTable *attributes = g_hash_table_new(g_str_hash, g_str_equal);
    g_hash_table_insert(attributes, (gpointer) "cache", (gpointer)cache_id);
    return attributes;
}

/// Overwrites length bytes in a way the compiler keeps.
static void wipe(void *bytes, size_t length) {
    volatile uint8_t *pointer = bytes;
    while (length-- > 0) *pointer++ = 0;
}

/// Whether an item is one of collection's (its object path is below the collection's).
static bool in_collection(gpointer item, SecretCollection *collection) {
    const gchar *path = g_dbus_proxy_get_object_path(item);
    const gchar *parent = g_dbus_proxy_get_object_path(G_DBUS_PROXY(collection));
    size_t length = strlen(parent);
    return strncmp(path, parent, length) == 0 && path[length] == '/';
}

/// Reads the key of cache_id from collection into key, unlocking nothing and prompting for nothing. (It searches the
/// whole service: secret_collection_search_sync of libsecret 0.20 leaks its reply.)
static tb_key_status read_key(Call *call, SecretCollection *collection, const char *cache_id, uint8_t *key,
                              size_t key_length, char **message) {
    GError *error = NULL;
    GHashTable *attributes = attributes_for(cache_id);
    GList *items = secret_service_search_sync(call->service, &cache_key_schema, attributes, SECRET_SEARCH_ALL,
                                              call->cancellable, &error);
    g_hash_table_unref(attributes);
    if (error != NULL) return fail_with(call, message, &error, "cannot search the keyring");
    SecretItem *item = NULL;
    bool locked = secret_collection_get_locked(collection);
    for (GList *each = items; each != NULL && item == NULL; each = each->next) {
        if (!in_collection(each->data, collection)) continue;
        if (secret_item_get_locked(each->data))
            locked = true;
        else
            item = each->data;
    }
    tb_key_status status = TB_KEY_OK;
    if (item == NULL && locked) {
        status = fail(message, TB_KEY_LOCKED, "the default collection %s is locked",
                      g_dbus_proxy_get_object_path(G_DBUS_PROXY(collection)));
    } else if (item == NULL) {
        status = fail(message, TB_KEY_NOT_FOUND, "the default keyring holds no key for cache %s", cache_id);
    } else if (!secret_item_load_secret_sync(item, call->cancellable, &error)) {
        status = fail_with(call, message, &error, "cannot read the keyring's item");
    } else {
        SecretValue *value = secret_item_get_secret(item);
        gsize length = 0;
        const gchar *bytes = value != NULL ? secret_value_get(value, &length) : NULL;
        if (bytes == NULL || length != key_length)
            status = fail(message, TB_KEY_FAILED, "the keyring's item holds %zu bytes, not %zu", (size_t)length,
                          key_length);
        else
            memcpy(key, bytes, key_length);
        if (value != NULL) secret_value_unref(value);
    }
    g_list_free_full(items, g_object_unref);
    return status;
}

/* Starts a call and finds the default collection into *collection; no default collection is when_missing with the
 * message missing. Whatever the status, the caller ends with g_clear_object(collection) and call_end(call). */
static tb_key_status begin_at_default(Call *call, int timeout_ms, char **message, tb_key_status when_missing,
                                      const char *missing, SecretCollection **collection) {
    *collection = NULL;
    tb_key_status status = call_begin(call, timeout_ms, message);
    if (status != TB_KEY_OK) return status;
    GError *error = NULL;
    *collection = default_collection(call, &error);
    if (error != NULL) return fail_with(call, message, &error, "cannot find the default keyring");
    if (*collection == NULL) return fail(message, when_missing, "%s", missing);
    return TB_KEY_OK;
}

tb_key_status tb_secret_service_lookup(const char *cache_id, uint8_t *key, size_t key_length, int timeout_ms,
                                       char **message) {
    if (cache_id == NULL || key == NULL || key_length == 0)
        return fail(message, TB_KEY_FAILED, "no cache id or no room for the key");
    Call call;
    SecretCollection *collection;
    tb_key_status status =
        begin_at_default(&call, timeout_ms, message, TB_KEY_NOT_FOUND, "no default keyring", &collection);
    if (status == TB_KEY_OK) status = read_key(&call, collection, cache_id, key, key_length, message);
    g_clear_object(&collection);
    call_end(&call);
    return status;
}

tb_key_status tb_secret_service_store(const char *cache_id, const char *label, const uint8_t *key,
                                      size_t key_length, int timeout_ms, char **message) {
    if (cache_id == NULL || label == NULL || key == NULL || key_length == 0)
        return fail(message, TB_KEY_FAILED, "no cache id, label or key");
    Call call;
    SecretCollection *collection;
    tb_key_status status = begin_at_default(&call, timeout_ms, message, TB_KEY_UNAVAILABLE,
                                            "no default keyring to keep the key in", &collection);
    GError *error = NULL;
    if (status == TB_KEY_OK && secret_collection_get_locked(collection)) {
        status = fail(message, TB_KEY_LOCKED, "the default collection %s is locked",
                      g_dbus_proxy_get_object_path(G_DBUS_PROXY(collection)));
    } else if (status == TB_KEY_OK) {
        GHashTable *attributes = attributes_for(cache_id);
        SecretValue *value = secret_value_new((const gchar *)key, (gssize)key_length, "application/octet-stream");
        SecretItem *item = secret_item_create_sync(collection, &cache_key_schema, attributes, label, value,
                                                   SECRET_ITEM_CREATE_REPLACE, call.cancellable, &error);
        secret_value_unref(value);
        g_hash_table_unref(attributes);
        if (item == NULL) status = fail_with(&call, message, &error, "cannot store the key in the default keyring");
        g_clear_object(&item);
        uint8_t *stored = status == TB_KEY_OK ? malloc(key_length) : NULL;
        if (status == TB_KEY_OK && stored == NULL) status = fail(message, TB_KEY_FAILED, "out of memory");
        if (stored != NULL) {
            status = read_key(&call, collection, cache_id, stored, key_length, message);
            uint8_t difference = 0;
            for (size_t index = 0; status == TB_KEY_OK && index < key_length; index++)
                difference |= stored[index] ^ key[index];
            if (difference != 0)
                status = fail(message, TB_KEY_FAILED, "the keyring gave back another key than the one stored");
            else if (status == TB_KEY_NOT_FOUND)
                status = TB_KEY_FAILED; // read_key said why: the key just stored cannot be found again.
            wipe(stored, key_length);
            free(stored);
        }
    }
    g_clear_object(&collection);
    call_end(&call);
    return status;
}

tb_key_status tb_secret_service_clear(const char *cache_id, int timeout_ms, char **message) {
    if (cache_id == NULL) return fail(message, TB_KEY_FAILED, "no cache id");
    Call call;
    tb_key_status status = call_begin(&call, timeout_ms, message);
    if (status != TB_KEY_OK) {
        call_end(&call);
        return status;
    }
    GError *error = NULL;
    GHashTable *attributes = attributes_for(cache_id);
    GList *items = secret_service_search_sync(call.service, &cache_key_schema, attributes, SECRET_SEARCH_ALL,
                                              call.cancellable, &error);
    g_hash_table_unref(attributes);
    if (error != NULL) status = fail_with(&call, message, &error, "cannot search the keyring");
    unsigned locked = 0;
    for (GList *each = items; each != NULL && status == TB_KEY_OK; each = each->next) {
        if (secret_item_get_locked(each->data))
            locked++;
        else if (!secret_item_delete_sync(each->data, call.cancellable, &error))
            status = fail_with(&call, message, &error, "cannot delete the keyring's item");
    }
    bool found = items != NULL;
    g_list_free_full(items, g_object_unref);
    SecretCollection *collection = NULL;
    if (status == TB_KEY_OK && !found) collection = default_collection(&call, &error);
    if (error != NULL) status = fail_with(&call, message, &error, "cannot find the default keyring");
    if (status == TB_KEY_OK && locked > 0)
        status = fail(message, TB_KEY_LOCKED, "%u item(s) of cache %s are in a locked collection", locked, cache_id);
    else if (status == TB_KEY_OK && collection != NULL && secret_collection_get_locked(collection))
        status = fail(message, TB_KEY_LOCKED, "the default collection %s is locked: it may hold a key of cache %s",
                      g_dbus_proxy_get_object_path(G_DBUS_PROXY(collection)), cache_id);
    g_clear_object(&collection);
    call_end(&call);
    return status;
}

tb_key_status tb_secret_service_unlock(int timeout_ms, char **message) {
    Call call;
    SecretCollection *collection;
    tb_key_status status =
        begin_at_default(&call, timeout_ms, message, TB_KEY_UNAVAILABLE, "no default keyring to unlock", &collection);
    GError *error = NULL;
    if (status == TB_KEY_OK && secret_collection_get_locked(collection)) {
        GList *objects = g_list_prepend(NULL, collection);
        gint unlocked = secret_service_unlock_sync(call.service, objects, call.cancellable, NULL, &error);
        g_list_free(objects);
        if (error != NULL)
            status = fail_with(&call, message, &error, "cannot unlock the default keyring");
        else if (unlocked == 0)
            status = fail(message, TB_KEY_LOCKED, "the default collection stayed locked (the prompt was dismissed)");
    }
    g_clear_object(&collection);
    call_end(&call);
    return status;
}
