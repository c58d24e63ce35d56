// The TPM 2.0 store (tpm2-tss ESAPI): the cache key sealed as a keyedhash object under the owner hierarchy's ECC
// storage primary key, which is derived again on each call and never made persistent.
#define _GNU_SOURCE // vasprintf, explicit_bzero
#include "CKeyStores.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tss2/tss2_esys.h>
#include <tss2/tss2_mu.h>
#include <tss2/tss2_tctildr.h>

#include "Library.h"

// tpm2-tss, opened on the first call (Library.h): ESAPI, its marshalling, and the TCTI loader.
#define TPM_ESYS_FUNCTIONS(X) \
    X(Esys_Create) X(Esys_CreatePrimary) X(Esys_Finalize) X(Esys_FlushContext) X(Esys_Free) X(Esys_GetRandom) \
    X(Esys_Initialize) X(Esys_Load) X(Esys_Startup) X(Esys_Unseal)
#define TPM_MU_FUNCTIONS(X) \
    X(Tss2_MU_TPM2B_PRIVATE_Marshal) X(Tss2_MU_TPM2B_PRIVATE_Unmarshal) X(Tss2_MU_TPM2B_PUBLIC_Marshal) \
    X(Tss2_MU_TPM2B_PUBLIC_Unmarshal)
#define TPM_TCTILDR_FUNCTIONS(X) \
    X(Tss2_TctiLdr_Finalize) X(Tss2_TctiLdr_Initialize)

/// The addresses of the three lists, once tpm_api_load has run.
static struct {
    TPM_ESYS_FUNCTIONS(TB_LIBRARY_FIELD)
    TPM_MU_FUNCTIONS(TB_LIBRARY_FIELD)
    TPM_TCTILDR_FUNCTIONS(TB_LIBRARY_FIELD)
} tpm_api;
#define TB_LIBRARY_TABLE tpm_api
static pthread_once_t tpm_api_once = PTHREAD_ONCE_INIT;
/// Why tpm2-tss cannot be used (malloc'd, kept), or NULL once tpm_api holds every function.
static char *tpm_api_problem;
static bool tpm_api_failed;

static void tpm_api_load(void) {
    // Three libraries, all or none: one that fails closes those opened before it.
    void *esys = NULL, *mu = NULL, *tctildr = NULL;
    tpm_api_failed = !TB_LIBRARY_OPEN("libtss2-esys.so.0", TPM_ESYS_FUNCTIONS, &esys, &tpm_api_problem) ||
                     !TB_LIBRARY_OPEN("libtss2-mu.so.0", TPM_MU_FUNCTIONS, &mu, &tpm_api_problem) ||
                     !TB_LIBRARY_OPEN("libtss2-tctildr.so.0", TPM_TCTILDR_FUNCTIONS, &tctildr, &tpm_api_problem);
    if (tpm_api_failed) {
        TB_LIBRARY_CLOSE(TPM_ESYS_FUNCTIONS, &esys);
        TB_LIBRARY_CLOSE(TPM_MU_FUNCTIONS, &mu);
    }
}

/// Loads tpm2-tss on the first call; false (with *message set) when it is not there.
static bool tpm_api_ready(char **message) {
    pthread_once(&tpm_api_once, tpm_api_load);
    if (!tpm_api_failed) return true;
    if (message != NULL) *message = strdup(tpm_api_problem != NULL ? tpm_api_problem : "tpm2-tss does not load");
    return false;
}

// From here on, each call of a library function goes through the table.
#define Esys_Create tpm_api.Esys_Create
#define Esys_CreatePrimary tpm_api.Esys_CreatePrimary
#define Esys_Finalize tpm_api.Esys_Finalize
#define Esys_FlushContext tpm_api.Esys_FlushContext
#define Esys_Free tpm_api.Esys_Free
#define Esys_GetRandom tpm_api.Esys_GetRandom
#define Esys_Initialize tpm_api.Esys_Initialize
#define Esys_Load tpm_api.Esys_Load
#define Esys_Startup tpm_api.Esys_Startup
#define Esys_Unseal tpm_api.Esys_Unseal
#define Tss2_MU_TPM2B_PRIVATE_Marshal tpm_api.Tss2_MU_TPM2B_PRIVATE_Marshal
#define Tss2_MU_TPM2B_PRIVATE_Unmarshal tpm_api.Tss2_MU_TPM2B_PRIVATE_Unmarshal
#define Tss2_MU_TPM2B_PUBLIC_Marshal tpm_api.Tss2_MU_TPM2B_PUBLIC_Marshal
#define Tss2_MU_TPM2B_PUBLIC_Unmarshal tpm_api.Tss2_MU_TPM2B_PUBLIC_Unmarshal
#define Tss2_TctiLdr_Finalize tpm_api.Tss2_TctiLdr_Finalize
#define Tss2_TctiLdr_Initialize tpm_api.Tss2_TctiLdr_Initialize

/// One open TPM: the TCTI loaded from the caller's configuration, and the ESAPI context on it.
typedef struct {
    TSS2_TCTI_CONTEXT *tcti;
    ESYS_CONTEXT *esys;
} tb_tpm;

static const TPM2B_DATA tpm_no_outside_info = {0};
static const TPML_PCR_SELECTION tpm_no_pcrs = {0};

/// Sets *message (when the caller asked for one) to a malloc'd sentence, and returns status.
__attribute__((format(printf, 3, 4))) static tb_key_status tpm_fail(char **message, tb_key_status status,
                                                                     const char *format, ...) {
    if (message != NULL) {
        va_list arguments;
        va_start(arguments, format);
        if (vasprintf(message, format, arguments) < 0) {
            *message = NULL;
        }
        va_end(arguments);
    }
    return status;
}

static pthread_once_t tpm_log_once = PTHREAD_ONCE_INIT;

/// Silences tpm2-tss's own log on stderr (a failure reaches the caller as a status and a message), unless the user
/// set TSS2_LOG.
static void tpm_quiet_log(void) {
    setenv("TSS2_LOG", "all+NONE", 0);
}

/// Opens the TPM behind tcti: loads the TCTI, starts ESAPI on it and sends TPM2_Startup, which a TPM already running
/// refuses with TPM2_RC_INITIALIZE. What it opened stays in tpm, for tpm_close, even on failure.
static tb_key_status tpm_open(tb_tpm *tpm, const char *tcti, char **message) {
    pthread_once(&tpm_log_once, tpm_quiet_log);
    *tpm = (tb_tpm){0};
    TSS2_RC rc = Tss2_TctiLdr_Initialize(tcti, &tpm->tcti);
    if (rc != TSS2_RC_SUCCESS) {
        return tpm_fail(message, TB_KEY_UNAVAILABLE, "There is no TPM at \"%s\" (tpm2-tss error 0x%08x).", tcti, rc);
    }
    rc = Esys_Initialize(&tpm->esys, tpm->tcti, NULL);
    if (rc != TSS2_RC_SUCCESS) {
        return tpm_fail(message, TB_KEY_UNAVAILABLE, "tpm2-tss could not open the TPM at \"%s\" (0x%08x).", tcti, rc);
    }
    rc = Esys_Startup(tpm->esys, TPM2_SU_CLEAR);
    if (rc != TSS2_RC_SUCCESS && (rc & ~TSS2_RC_LAYER_MASK) != TPM2_RC_INITIALIZE) {
        return tpm_fail(message, TB_KEY_UNAVAILABLE, "The TPM at \"%s\" did not start (0x%08x).", tcti, rc);
    }
    return TB_KEY_OK;
}

/// Flushes a loaded object from the TPM, if there is one.
static void tpm_flush(tb_tpm *tpm, ESYS_TR *object) {
    if (*object != ESYS_TR_NONE) {
        Esys_FlushContext(tpm->esys, *object);
        *object = ESYS_TR_NONE;
    }
}

/// Closes what tpm_open opened: the ESAPI context, then the TCTI.
static void tpm_close(tb_tpm *tpm) {
    Esys_Finalize(&tpm->esys);
    Tss2_TctiLdr_Finalize(&tpm->tcti);
}

/// Derives the owner hierarchy's storage primary key from the TCG template (ECC NIST P-256, AES-128-CFB, empty
/// unique): the same key each time on the same TPM, until its owner hierarchy is cleared.
static tb_key_status tpm_primary(tb_tpm *tpm, ESYS_TR *primary, char **message) {
    const TPM2B_PUBLIC template = {
        .publicArea = {
            .type = TPM2_ALG_ECC,
            .nameAlg = TPM2_ALG_SHA256,
            .objectAttributes = TPMA_OBJECT_RESTRICTED | TPMA_OBJECT_DECRYPT | TPMA_OBJECT_FIXEDTPM |
                                TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_SENSITIVEDATAORIGIN |
                                TPMA_OBJECT_USERWITHAUTH | TPMA_OBJECT_NODA,
            .parameters.eccDetail = {
                .symmetric = {.algorithm = TPM2_ALG_AES, .keyBits.aes = 128, .mode.aes = TPM2_ALG_CFB},
                .scheme = {.scheme = TPM2_ALG_NULL},
                .curveID = TPM2_ECC_NIST_P256,
                .kdf = {.scheme = TPM2_ALG_NULL},
            },
        },
    };
    const TPM2B_SENSITIVE_CREATE no_auth = {0};
    TSS2_RC rc = Esys_CreatePrimary(tpm->esys, ESYS_TR_RH_OWNER, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE,
                                    &no_auth, &template, &tpm_no_outside_info, &tpm_no_pcrs, primary, NULL, NULL,
                                    NULL, NULL);
    if (rc != TSS2_RC_SUCCESS) {
        *primary = ESYS_TR_NONE;
        return tpm_fail(message, TB_KEY_FAILED, "The TPM did not create its storage primary key (0x%08x).", rc);
    }
    return TB_KEY_OK;
}

/// Marshals the sealed object (TPM2B_PUBLIC then TPM2B_PRIVATE) into a malloc'd *blob.
static tb_key_status tpm_marshal(const TPM2B_PUBLIC *public, const TPM2B_PRIVATE *private, uint8_t **blob,
                                 size_t *blob_length, char **message) {
    uint8_t buffer[sizeof(TPM2B_PUBLIC) + sizeof(TPM2B_PRIVATE)];
    size_t length = 0;
    TSS2_RC rc = Tss2_MU_TPM2B_PUBLIC_Marshal(public, buffer, sizeof buffer, &length);
    if (rc == TSS2_RC_SUCCESS) {
        rc = Tss2_MU_TPM2B_PRIVATE_Marshal(private, buffer, sizeof buffer, &length);
    }
    if (rc != TSS2_RC_SUCCESS) {
        return tpm_fail(message, TB_KEY_FAILED, "tpm2-tss could not marshal the sealed key (0x%08x).", rc);
    }
    *blob = malloc(length);
    if (*blob == NULL) {
        return tpm_fail(message, TB_KEY_FAILED, "There is no memory for the sealed key.");
    }
    memcpy(*blob, buffer, length);
    *blob_length = length;
    return TB_KEY_OK;
}

/// Seals key under this TPM's storage primary key: a keyedhash object with no policy and an empty auth value.
tb_key_status tb_tpm_seal(const char *tcti, const uint8_t *key, size_t key_length, uint8_t **blob,
                          size_t *blob_length, char **message) {
    const TPM2B_PUBLIC template = {
        .publicArea = {
            .type = TPM2_ALG_KEYEDHASH,
            .nameAlg = TPM2_ALG_SHA256,
            .objectAttributes = TPMA_OBJECT_FIXEDTPM | TPMA_OBJECT_FIXEDPARENT | TPMA_OBJECT_USERWITHAUTH |
                                TPMA_OBJECT_NODA,
            .parameters.keyedHashDetail.scheme = {.scheme = TPM2_ALG_NULL},
        },
    };
    TPM2B_SENSITIVE_CREATE sensitive = {0};
    TPM2B_PUBLIC *public = NULL;
    TPM2B_PRIVATE *private = NULL;
    ESYS_TR primary = ESYS_TR_NONE;
    tb_tpm tpm = {0};
    tb_key_status status;
    *blob = NULL;
    *blob_length = 0;
    if (key_length == 0 || key_length > sizeof sensitive.sensitive.data.buffer) {
        return tpm_fail(message, TB_KEY_FAILED, "A TPM cannot seal a key of %zu bytes.", key_length);
    }
    if (!tpm_api_ready(message)) {
        return TB_KEY_UNAVAILABLE;
    }
    if ((status = tpm_open(&tpm, tcti, message)) != TB_KEY_OK ||
        (status = tpm_primary(&tpm, &primary, message)) != TB_KEY_OK) {
        goto cleanup;
    }
    sensitive.sensitive.data.size = (UINT16)key_length;
    memcpy(sensitive.sensitive.data.buffer, key, key_length);
    TSS2_RC rc = Esys_Create(tpm.esys, primary, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, &sensitive, &template,
                             &tpm_no_outside_info, &tpm_no_pcrs, &private, &public, NULL, NULL, NULL);
    if (rc != TSS2_RC_SUCCESS) {
        status = tpm_fail(message, TB_KEY_FAILED, "The TPM refused to seal the key (0x%08x).", rc);
        goto cleanup;
    }
    status = tpm_marshal(public, private, blob, blob_length, message);
cleanup:
    explicit_bzero(&sensitive, sizeof sensitive);
    Esys_Free(public);
    Esys_Free(private);
    tpm_flush(&tpm, &primary);
    tpm_close(&tpm);
    return status;
}

/// Unmarshals a blob of tb_tpm_seal, which must hold the two structures and nothing else.
static tb_key_status tpm_unmarshal(const uint8_t *blob, size_t blob_length, TPM2B_PUBLIC *public,
                                   TPM2B_PRIVATE *private, char **message) {
    size_t offset = 0;
    TSS2_RC rc = Tss2_MU_TPM2B_PUBLIC_Unmarshal(blob, blob_length, &offset, public);
    if (rc == TSS2_RC_SUCCESS) {
        rc = Tss2_MU_TPM2B_PRIVATE_Unmarshal(blob, blob_length, &offset, private);
    }
    if (rc != TSS2_RC_SUCCESS) {
        return tpm_fail(message, TB_KEY_FAILED, "The sealed key is damaged: tpm2-tss could not unmarshal it (0x%08x).",
                        rc);
    }
    if (offset != blob_length) {
        return tpm_fail(message, TB_KEY_FAILED, "The sealed key is damaged: only %zu of its %zu bytes are read.",
                        offset, blob_length);
    }
    return TB_KEY_OK;
}

/// Whether rc, from TPM2_Load, says the object is not this TPM's: an error of the TPM itself in format one (a
/// parameter that does not check: TPM2_RC_INTEGRITY, TPM2_RC_SIZE, TPM2_RC_VALUE, ...) or TPM2_RC_SENSITIVE. A warning
/// (TPM2_RC_OBJECT_MEMORY, TPM2_RC_RETRY, ...) or an error of tpm2-tss or the transport is not.
static bool tpm_foreign(TSS2_RC rc) {
    TSS2_RC layer = rc & TSS2_RC_LAYER_MASK;
    TSS2_RC code = rc & ~TSS2_RC_LAYER_MASK;
    if (layer != TSS2_TPM_RC_LAYER && layer != TSS2_RESMGR_TPM_RC_LAYER) {
        return false;
    }
    return (code & TPM2_RC_FMT1) != 0 || code == TPM2_RC_SENSITIVE;
}

/// Loads the sealed object under the primary key.
static tb_key_status tpm_load(tb_tpm *tpm, ESYS_TR primary, const TPM2B_PUBLIC *public,
                              const TPM2B_PRIVATE *private, ESYS_TR *object, char **message) {
    TSS2_RC rc = Esys_Load(tpm->esys, primary, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, private, public, object);
    if (rc == TSS2_RC_SUCCESS) {
        return TB_KEY_OK;
    }
    *object = ESYS_TR_NONE;
    if (tpm_foreign(rc)) {
        return tpm_fail(message, TB_KEY_WRONG_DEVICE,
                        "The TPM refused to load the sealed key (0x%08x): it was sealed by another TPM, or this "
                        "TPM's owner hierarchy was cleared since.",
                        rc);
    }
    return tpm_fail(message, TB_KEY_FAILED, "The TPM could not load the sealed key (0x%08x).", rc);
}

/// Unseals the loaded object into key, which it must fill exactly.
static tb_key_status tpm_read(tb_tpm *tpm, ESYS_TR object, uint8_t *key, size_t key_length, char **message) {
    TPM2B_SENSITIVE_DATA *data = NULL;
    tb_key_status status = TB_KEY_OK;
    TSS2_RC rc = Esys_Unseal(tpm->esys, object, ESYS_TR_PASSWORD, ESYS_TR_NONE, ESYS_TR_NONE, &data);
    if (rc != TSS2_RC_SUCCESS) {
        status = tpm_fail(message, TB_KEY_FAILED, "The TPM refused to unseal the key (0x%08x).", rc);
    } else if (data->size != key_length) {
        status = tpm_fail(message, TB_KEY_FAILED, "The TPM unsealed %u bytes, not the %zu of a key.",
                          (unsigned)data->size, key_length);
    } else {
        memcpy(key, data->buffer, key_length);
    }
    if (data != NULL) {
        explicit_bzero(data, sizeof *data);
        Esys_Free(data);
    }
    return status;
}

/// Unseals a blob of tb_tpm_seal into key.
tb_key_status tb_tpm_unseal(const char *tcti, const uint8_t *blob, size_t blob_length, uint8_t *key,
                            size_t key_length, char **message) {
    TPM2B_PUBLIC public = {0};
    TPM2B_PRIVATE private = {0};
    ESYS_TR primary = ESYS_TR_NONE;
    ESYS_TR object = ESYS_TR_NONE;
    tb_tpm tpm = {0};
    tb_key_status status;
    if (!tpm_api_ready(message)) {
        return TB_KEY_UNAVAILABLE;
    }
    if ((status = tpm_unmarshal(blob, blob_length, &public, &private, message)) != TB_KEY_OK ||
        (status = tpm_open(&tpm, tcti, message)) != TB_KEY_OK ||
        (status = tpm_primary(&tpm, &primary, message)) != TB_KEY_OK ||
        (status = tpm_load(&tpm, primary, &public, &private, &object, message)) != TB_KEY_OK) {
        goto cleanup;
    }
    status = tpm_read(&tpm, object, key, key_length, message);
cleanup:
    tpm_flush(&tpm, &object);
    tpm_flush(&tpm, &primary);
    tpm_close(&tpm);
    return status;
}

/// Whether the TPM behind tcti answers: it starts, and gives a few random bytes.
tb_key_status tb_tpm_probe(const char *tcti, char **message) {
    TPM2B_DIGEST *random = NULL;
    tb_tpm tpm = {0};
    if (!tpm_api_ready(message)) {
        return TB_KEY_UNAVAILABLE;
    }
    tb_key_status status = tpm_open(&tpm, tcti, message);
    if (status == TB_KEY_OK) {
        TSS2_RC rc = Esys_GetRandom(tpm.esys, ESYS_TR_NONE, ESYS_TR_NONE, ESYS_TR_NONE, 8, &random);
        if (rc != TSS2_RC_SUCCESS) {
            status = tpm_fail(message, TB_KEY_UNAVAILABLE, "The TPM at \"%s\" does not answer (0x%08x).", tcti, rc);
        }
    }
    Esys_Free(random);
    tpm_close(&tpm);
    return status;
}
