#pragma once
// The C side of the cache key's stores: the Secret Service through libsecret, the TPM 2.0 through tpm2-tss.
// No call keeps a copy of a key: key bytes go straight between the caller's buffer and the store, and every
// temporary copy is wiped. A message never holds key bytes.
#include <stddef.h>
#include <stdint.h>

/// What a store said.
typedef enum {
    /// Done.
    TB_KEY_OK = 0,
    /// The store works, and holds no key for this cache.
    TB_KEY_NOT_FOUND = 1,
    /// The store holds the key (or would), but is locked: the user has to unlock it.
    TB_KEY_LOCKED = 2,
    /// No such store here: no Secret Service on the bus, no TPM, no default collection.
    TB_KEY_UNAVAILABLE = 3,
    /// The store answered with an error; the message says which.
    TB_KEY_FAILED = 4,
    /// TPM: the key was sealed by another TPM (or this TPM's owner hierarchy was cleared since).
    TB_KEY_WRONG_DEVICE = 5,
} tb_key_status;

// MARK: - Secret Service (org.freedesktop.secrets on the session bus, through libsecret)
//
// The key is one item of the schema "org.tokenbroker.CacheKey" (attribute "cache" = cache_id) in the default
// collection. Each call gives up after timeout_ms milliseconds (TB_KEY_UNAVAILABLE). On any status but TB_KEY_OK,
// *message (when message is not NULL) is set to a malloc'd sentence saying why, which the caller frees.

/// Reads the key of cache_id into key (exactly key_length bytes) without unlocking anything: a locked item or
/// a locked default collection is TB_KEY_LOCKED.
tb_key_status tb_secret_service_lookup(const char *cache_id, uint8_t *key, size_t key_length, int timeout_ms,
                                       char **message);

/// Stores (or replaces) the key of cache_id in the default collection, labelled label. A locked collection is
/// TB_KEY_LOCKED (no prompt); no default collection is TB_KEY_UNAVAILABLE.
tb_key_status tb_secret_service_store(const char *cache_id, const char *label, const uint8_t *key,
                                      size_t key_length, int timeout_ms, char **message);

/// Deletes every item of cache_id (none is TB_KEY_OK).
tb_key_status tb_secret_service_clear(const char *cache_id, int timeout_ms, char **message);

/// Asks the service to unlock the default collection (on a desktop, the keyring's own password prompt).
tb_key_status tb_secret_service_unlock(int timeout_ms, char **message);

// MARK: - TPM 2.0 (tpm2-tss ESAPI over a tctildr configuration, e.g. "device:/dev/tpmrm0" or
// "swtpm:host=127.0.0.1,port=2321")
//
// The key is sealed as a keyedhash object under the owner hierarchy's primary storage key (ECC NIST P-256, the
// TCG "SRK" template, derived again on each use and never made persistent), with no policy and an empty auth
// value: only this TPM can unseal it. On any status but TB_KEY_OK, *message is set as above.

/// Whether the TPM answers (TB_KEY_OK) or is not there (TB_KEY_UNAVAILABLE).
tb_key_status tb_tpm_probe(const char *tcti, char **message);

/// Seals key; *blob (malloc'd, the caller frees) is the sealed object's TPM2B_PUBLIC then TPM2B_PRIVATE, marshalled.
tb_key_status tb_tpm_seal(const char *tcti, const uint8_t *key, size_t key_length, uint8_t **blob,
                          size_t *blob_length, char **message);

/// Unseals a blob of tb_tpm_seal into key (exactly key_length bytes). A blob this TPM cannot load is
/// TB_KEY_WRONG_DEVICE.
tb_key_status tb_tpm_unseal(const char *tcti, const uint8_t *blob, size_t blob_length, uint8_t *key,
                            size_t key_length, char **message);
