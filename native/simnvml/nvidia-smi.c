/*
 * nvidia-smi - NVIDIA's System Management Interface, for sro's simulated NVIDIA driver.
 *
 * Why it exists: people, scripts and validation pods run `nvidia-smi` in a container to see the
 * GPUs they were given (`-L`, `--query-gpu=... --format=csv`, `-q`, the table). On the simulated
 * driver they must get the answers NVIDIA's tool would print, in its formats, so those scripts
 * work unchanged. It learns everything through NVML calls of libnvidia-ml.so.1, exactly as the
 * real tool does: it never reads the simulated driver's state itself, so what it prints is what
 * every NVML client (nvidia-ml-py, the device plugin, the exporter) sees, renumbered indexes,
 * hidden GPUs and lost GPUs included. Every report says the driver is SIMULATED.
 *
 * Exit codes are NVIDIA's: 0 success, 2 invalid argument, 6 no devices found, 9 the driver
 * (NVML) could not be reached, 15 a GPU has fallen off the bus (is lost).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "nvml.h"

#define RC_OK 0
#define RC_INVALID_ARGUMENT 2
#define RC_NO_DEVICES 6
#define RC_DRIVER_NOT_LOADED 9
#define RC_GPU_LOST 15

#define SIMULATED_LINE "SIMULATED by sro: no NVIDIA hardware or kernel module behind this driver"
#define NO_DEVICES "No devices were found"
#define NO_DRIVER \
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. " \
    "Make sure that the latest NVIDIA driver is installed and running."
#define BAD_ARGS "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."

#define VALUE_LEN 128
#define MIB (1024ULL * 1024ULL)

struct gpu {
    unsigned int index; /* NVML's index: visible GPUs numbered 0..n-1 */
    nvmlDevice_t dev;
};

static unsigned int g_count;  /* visible GPUs (the `count` field) */
static int g_saw_lost;        /* a selected GPU answered NVML_ERROR_GPU_IS_LOST */

/* ---- values ---------------------------------------------------------------------------------- */

/* How one context prints a failed NVML call: csv, -q, or the table. */
enum style { CSV, LOG, TABLE };

static const char *error_text(nvmlReturn_t r, enum style style) {
    if (r == NVML_ERROR_GPU_IS_LOST) {
        g_saw_lost = 1;
        return style == CSV ? "[GPU is lost]" : style == LOG ? "GPU is lost" : "ERR!";
    }
    if (r == NVML_ERROR_NOT_SUPPORTED || r == NVML_ERROR_NOT_FOUND || r == NVML_ERROR_NO_DATA)
        return style == CSV ? "[N/A]" : "N/A";
    if (r == NVML_ERROR_NO_PERMISSION)
        return style == CSV   ? "[Insufficient Permissions]"
               : style == LOG ? "Insufficient Permissions"
                              : "ERR!";
    return style == CSV ? "[Unknown Error]" : style == LOG ? "Unknown Error" : "ERR!";
}

static void put(char *buf, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(char *buf, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, VALUE_LEN, fmt, ap);
    va_end(ap);
}

static const char *enabled(unsigned int on) { return on ? "Enabled" : "Disabled"; }

/* "12040" -> "12.4", as NVIDIA prints the CUDA driver version */
static void cuda_version(char *buf) {
    int v = 0;
    nvmlReturn_t r = nvmlSystemGetCudaDriverVersion_v2(&v);
    if (r == NVML_SUCCESS)
        put(buf, "%d.%d", v / 1000, (v % 1000) / 10);
    else
        put(buf, "%s", error_text(r, LOG));
}

static void driver_version(char *buf) {
    char v[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    nvmlReturn_t r = nvmlSystemGetDriverVersion(v, sizeof v);
    put(buf, "%s", r == NVML_SUCCESS ? v : error_text(r, LOG));
}

/* Memory as nvidia-smi reports it: reserved apart from used when the v2 query answers. */
static nvmlReturn_t memory(nvmlDevice_t dev, unsigned long long mib[4] /* total reserved used free */) {
    nvmlMemory_v2_t m2 = {.version = nvmlMemory_v2};
    nvmlReturn_t r = nvmlDeviceGetMemoryInfo_v2(dev, &m2);
    if (r == NVML_SUCCESS) {
        mib[0] = m2.total / MIB, mib[1] = m2.reserved / MIB, mib[2] = m2.used / MIB, mib[3] = m2.free / MIB;
        return r;
    }
    if (r == NVML_ERROR_GPU_IS_LOST)
        return r;
    nvmlMemory_t m1;
    r = nvmlDeviceGetMemoryInfo(dev, &m1);
    if (r == NVML_SUCCESS)
        mib[0] = m1.total / MIB, mib[1] = 0, mib[2] = m1.used / MIB, mib[3] = m1.free / MIB;
    return r;
}

/* ---- --query-gpu fields ---------------------------------------------------------------------- */

/* A field's getter writes its value (units included when `units`) into buf. */
typedef nvmlReturn_t (*getter)(const struct gpu *g, int units, char *buf);

struct field {
    const char *name;  /* NVIDIA's name, also the csv header */
    const char *alias; /* a second name nvidia-smi accepts, or NULL */
    const char *unit;  /* the header's "[unit]", or NULL */
    getter get;
};

#define UNIT(units, u) ((units) ? (u) : "") /* u: " MHz", or "" for a bare number */

static nvmlReturn_t f_index(const struct gpu *g, int units, char *buf) {
    (void)units;
    put(buf, "%u", g->index);
    return NVML_SUCCESS;
}

static nvmlReturn_t f_count(const struct gpu *g, int units, char *buf) {
    (void)g, (void)units;
    put(buf, "%u", g_count);
    return NVML_SUCCESS;
}

static nvmlReturn_t f_driver_version(const struct gpu *g, int units, char *buf) {
    char v[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    (void)g, (void)units;
    nvmlReturn_t r = nvmlSystemGetDriverVersion(v, sizeof v);
    if (r == NVML_SUCCESS)
        put(buf, "%s", v);
    return r;
}

#define STRING_FIELD(fn, call, size)                                       \
    static nvmlReturn_t fn(const struct gpu *g, int units, char *buf) {    \
        char v[size];                                                      \
        (void)units;                                                       \
        nvmlReturn_t r = call(g->dev, v, sizeof v);                        \
        if (r == NVML_SUCCESS)                                             \
            put(buf, "%s", v);                                             \
        return r;                                                          \
    }
STRING_FIELD(f_name, nvmlDeviceGetName, NVML_DEVICE_NAME_V2_BUFFER_SIZE)
STRING_FIELD(f_uuid, nvmlDeviceGetUUID, NVML_DEVICE_UUID_V2_BUFFER_SIZE)
STRING_FIELD(f_serial, nvmlDeviceGetSerial, NVML_DEVICE_SERIAL_BUFFER_SIZE)

static nvmlReturn_t f_bus_id(const struct gpu *g, int units, char *buf) {
    nvmlPciInfo_t pci;
    (void)units;
    nvmlReturn_t r = nvmlDeviceGetPciInfo_v3(g->dev, &pci);
    if (r == NVML_SUCCESS)
        put(buf, "%s", pci.busId);
    return r;
}

#define UINT_FIELD(fn, call, fmt, unit)                                    \
    static nvmlReturn_t fn(const struct gpu *g, int units, char *buf) {    \
        unsigned int v = 0;                                                \
        nvmlReturn_t r = call;                                             \
        if (r == NVML_SUCCESS)                                             \
            put(buf, fmt "%s", v, UNIT(units, unit));                      \
        return r;                                                          \
    }
UINT_FIELD(f_temp, nvmlDeviceGetTemperature(g->dev, NVML_TEMPERATURE_GPU, &v), "%u", "")
UINT_FIELD(f_clock_sm, nvmlDeviceGetClockInfo(g->dev, NVML_CLOCK_SM, &v), "%u", " MHz")
UINT_FIELD(f_clock_mem, nvmlDeviceGetClockInfo(g->dev, NVML_CLOCK_MEM, &v), "%u", " MHz")
UINT_FIELD(f_clock_gr, nvmlDeviceGetClockInfo(g->dev, NVML_CLOCK_GRAPHICS, &v), "%u", " MHz")
UINT_FIELD(f_max_sm, nvmlDeviceGetMaxClockInfo(g->dev, NVML_CLOCK_SM, &v), "%u", " MHz")
UINT_FIELD(f_max_mem, nvmlDeviceGetMaxClockInfo(g->dev, NVML_CLOCK_MEM, &v), "%u", " MHz")
UINT_FIELD(f_max_gr, nvmlDeviceGetMaxClockInfo(g->dev, NVML_CLOCK_GRAPHICS, &v), "%u", " MHz")
UINT_FIELD(f_gen_cur, nvmlDeviceGetCurrPcieLinkGeneration(g->dev, &v), "%u", "")
UINT_FIELD(f_gen_max, nvmlDeviceGetMaxPcieLinkGeneration(g->dev, &v), "%u", "")
UINT_FIELD(f_width_cur, nvmlDeviceGetCurrPcieLinkWidth(g->dev, &v), "%u", "")
UINT_FIELD(f_width_max, nvmlDeviceGetMaxPcieLinkWidth(g->dev, &v), "%u", "")

#define POWER_FIELD(fn, call)                                              \
    static nvmlReturn_t fn(const struct gpu *g, int units, char *buf) {    \
        unsigned int mw = 0;                                               \
        nvmlReturn_t r = call(g->dev, &mw);                                \
        if (r == NVML_SUCCESS)                                             \
            put(buf, "%.2f%s", mw / 1000.0, UNIT(units, " W"));             \
        return r;                                                          \
    }
POWER_FIELD(f_power_draw, nvmlDeviceGetPowerUsage)
POWER_FIELD(f_power_limit, nvmlDeviceGetPowerManagementLimit)
POWER_FIELD(f_enforced_limit, nvmlDeviceGetEnforcedPowerLimit)
POWER_FIELD(f_default_limit, nvmlDeviceGetPowerManagementDefaultLimit)

#define MEMORY_FIELD(fn, slot)                                             \
    static nvmlReturn_t fn(const struct gpu *g, int units, char *buf) {    \
        unsigned long long mib[4];                                         \
        nvmlReturn_t r = memory(g->dev, mib);                              \
        if (r == NVML_SUCCESS)                                             \
            put(buf, "%llu%s", mib[slot], UNIT(units, " MiB"));             \
        return r;                                                          \
    }
MEMORY_FIELD(f_mem_total, 0)
MEMORY_FIELD(f_mem_reserved, 1)
MEMORY_FIELD(f_mem_used, 2)
MEMORY_FIELD(f_mem_free, 3)

#define UTIL_FIELD(fn, member)                                             \
    static nvmlReturn_t fn(const struct gpu *g, int units, char *buf) {    \
        nvmlUtilization_t u;                                               \
        nvmlReturn_t r = nvmlDeviceGetUtilizationRates(g->dev, &u);        \
        if (r == NVML_SUCCESS)                                             \
            put(buf, "%u%s", u.member, UNIT(units, " %"));                 \
        return r;                                                          \
    }
UTIL_FIELD(f_util_gpu, gpu)
UTIL_FIELD(f_util_mem, memory)

#define ECC_FIELD(fn, type, counter)                                                    \
    static nvmlReturn_t fn(const struct gpu *g, int units, char *buf) {                 \
        unsigned long long n = 0;                                                       \
        (void)units;                                                                    \
        nvmlReturn_t r = nvmlDeviceGetTotalEccErrors(g->dev, type, counter, &n);        \
        if (r == NVML_SUCCESS)                                                          \
            put(buf, "%llu", n);                                                        \
        return r;                                                                       \
    }
ECC_FIELD(f_ecc_cor_vol, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_VOLATILE_ECC)
ECC_FIELD(f_ecc_unc_vol, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_VOLATILE_ECC)
ECC_FIELD(f_ecc_cor_agg, NVML_MEMORY_ERROR_TYPE_CORRECTED, NVML_AGGREGATE_ECC)
ECC_FIELD(f_ecc_unc_agg, NVML_MEMORY_ERROR_TYPE_UNCORRECTED, NVML_AGGREGATE_ECC)

static nvmlReturn_t f_temp_mem(const struct gpu *g, int units, char *buf) {
    nvmlFieldValue_t v = {.fieldId = NVML_FI_DEV_MEMORY_TEMP};
    (void)units;
    nvmlReturn_t r = nvmlDeviceGetFieldValues(g->dev, 1, &v);
    if (r == NVML_SUCCESS)
        r = v.nvmlReturn;
    if (r == NVML_SUCCESS)
        put(buf, "%u",
            v.valueType == NVML_VALUE_TYPE_UNSIGNED_INT ? v.value.uiVal : (unsigned int)v.value.ullVal);
    return r;
}

static nvmlReturn_t f_compute_cap(const struct gpu *g, int units, char *buf) {
    int major = 0, minor = 0;
    (void)units;
    nvmlReturn_t r = nvmlDeviceGetCudaComputeCapability(g->dev, &major, &minor);
    if (r == NVML_SUCCESS)
        put(buf, "%d.%d", major, minor);
    return r;
}

static nvmlReturn_t mig_mode(const struct gpu *g, int pending, char *buf) {
    unsigned int current = 0, next = 0;
    nvmlReturn_t r = nvmlDeviceGetMigMode(g->dev, &current, &next);
    if (r == NVML_SUCCESS)
        put(buf, "%s", enabled(pending ? next : current));
    return r;
}
static nvmlReturn_t f_mig_current(const struct gpu *g, int units, char *buf) {
    (void)units;
    return mig_mode(g, 0, buf);
}
static nvmlReturn_t f_mig_pending(const struct gpu *g, int units, char *buf) {
    (void)units;
    return mig_mode(g, 1, buf);
}

static nvmlReturn_t ecc_mode(const struct gpu *g, int pending, char *buf) {
    nvmlEnableState_t current = NVML_FEATURE_DISABLED, next = NVML_FEATURE_DISABLED;
    nvmlReturn_t r = nvmlDeviceGetEccMode(g->dev, &current, &next);
    if (r == NVML_SUCCESS)
        put(buf, "%s", enabled(pending ? next : current));
    return r;
}
static nvmlReturn_t f_ecc_current(const struct gpu *g, int units, char *buf) {
    (void)units;
    return ecc_mode(g, 0, buf);
}
static nvmlReturn_t f_ecc_pending(const struct gpu *g, int units, char *buf) {
    (void)units;
    return ecc_mode(g, 1, buf);
}

static nvmlReturn_t f_persistence(const struct gpu *g, int units, char *buf) {
    nvmlEnableState_t mode = NVML_FEATURE_DISABLED;
    (void)units;
    nvmlReturn_t r = nvmlDeviceGetPersistenceMode(g->dev, &mode);
    if (r == NVML_SUCCESS)
        put(buf, "%s", enabled(mode));
    return r;
}

static nvmlReturn_t f_pstate(const struct gpu *g, int units, char *buf) {
    nvmlPstates_t p = NVML_PSTATE_UNKNOWN;
    (void)units;
    nvmlReturn_t r = nvmlDeviceGetPerformanceState(g->dev, &p);
    if (r == NVML_SUCCESS && p == NVML_PSTATE_UNKNOWN)
        put(buf, "Unknown");
    else if (r == NVML_SUCCESS)
        put(buf, "P%d", (int)p);
    return r;
}

static nvmlReturn_t f_compute_mode(const struct gpu *g, int units, char *buf) {
    static const char *const names[] = {"Default", "Exclusive_Thread", "Prohibited", "Exclusive_Process"};
    nvmlComputeMode_t mode = NVML_COMPUTEMODE_DEFAULT;
    (void)units;
    nvmlReturn_t r = nvmlDeviceGetComputeMode(g->dev, &mode);
    if (r == NVML_SUCCESS)
        put(buf, "%s", (unsigned)mode < NVML_COMPUTEMODE_COUNT ? names[mode] : "Unknown");
    return r;
}

static const struct field FIELDS[] = {
    {"timestamp", NULL, NULL, NULL}, /* filled in by the caller: one time for the whole report */
    {"driver_version", NULL, NULL, f_driver_version},
    {"count", NULL, NULL, f_count},
    {"name", "gpu_name", NULL, f_name},
    {"serial", "gpu_serial", NULL, f_serial},
    {"uuid", "gpu_uuid", NULL, f_uuid},
    {"pci.bus_id", "gpu_bus_id", NULL, f_bus_id},
    {"index", NULL, NULL, f_index},
    {"persistence_mode", NULL, NULL, f_persistence},
    {"pstate", NULL, NULL, f_pstate},
    {"compute_mode", NULL, NULL, f_compute_mode},
    {"compute_cap", NULL, NULL, f_compute_cap},
    {"pcie.link.gen.current", NULL, NULL, f_gen_cur},
    {"pcie.link.gen.max", NULL, NULL, f_gen_max},
    {"pcie.link.width.current", NULL, NULL, f_width_cur},
    {"pcie.link.width.max", NULL, NULL, f_width_max},
    {"memory.total", NULL, "MiB", f_mem_total},
    {"memory.reserved", NULL, "MiB", f_mem_reserved},
    {"memory.used", NULL, "MiB", f_mem_used},
    {"memory.free", NULL, "MiB", f_mem_free},
    {"utilization.gpu", NULL, "%", f_util_gpu},
    {"utilization.memory", NULL, "%", f_util_mem},
    {"ecc.mode.current", NULL, NULL, f_ecc_current},
    {"ecc.mode.pending", NULL, NULL, f_ecc_pending},
    {"ecc.errors.corrected.volatile.total", NULL, NULL, f_ecc_cor_vol},
    {"ecc.errors.uncorrected.volatile.total", NULL, NULL, f_ecc_unc_vol},
    {"ecc.errors.corrected.aggregate.total", NULL, NULL, f_ecc_cor_agg},
    {"ecc.errors.uncorrected.aggregate.total", NULL, NULL, f_ecc_unc_agg},
    {"temperature.gpu", NULL, NULL, f_temp},
    {"temperature.memory", NULL, NULL, f_temp_mem},
    {"power.draw", NULL, "W", f_power_draw},
    {"power.limit", NULL, "W", f_power_limit},
    {"enforced.power.limit", NULL, "W", f_enforced_limit},
    {"power.default_limit", NULL, "W", f_default_limit},
    {"clocks.current.graphics", "clocks.gr", "MHz", f_clock_gr},
    {"clocks.current.sm", "clocks.sm", "MHz", f_clock_sm},
    {"clocks.current.memory", "clocks.mem", "MHz", f_clock_mem},
    {"clocks.max.graphics", "clocks.max.gr", "MHz", f_max_gr},
    {"clocks.max.sm", NULL, "MHz", f_max_sm},
    {"clocks.max.memory", "clocks.max.mem", "MHz", f_max_mem},
    {"mig.mode.current", NULL, NULL, f_mig_current},
    {"mig.mode.pending", NULL, NULL, f_mig_pending},
};
#define N_FIELDS (sizeof FIELDS / sizeof FIELDS[0])

static const struct field *find_field(const char *name) {
    for (size_t i = 0; i < N_FIELDS; i++)
        if (strcmp(FIELDS[i].name, name) == 0 || (FIELDS[i].alias && strcmp(FIELDS[i].alias, name) == 0))
            return &FIELDS[i];
    return NULL;
}

/* the local time in `fmt`; a "%%03d" left in it by strftime (as "%03d") gets the milliseconds */
static void timestamp(char *buf, const char *fmt) {
    struct timespec now;
    struct tm tm;
    char text[VALUE_LEN];
    clock_gettime(CLOCK_REALTIME, &now);
    localtime_r(&now.tv_sec, &tm);
    strftime(text, sizeof text, fmt, &tm);
    if (strstr(text, "%03d"))
        snprintf(buf, VALUE_LEN, "%.*s%03ld", (int)(strstr(text, "%03d") - text), text, now.tv_nsec / 1000000);
    else
        snprintf(buf, VALUE_LEN, "%s", text);
}

/* What --query-gpu and --format ask for, checked before NVML is touched (as nvidia-smi does). */
struct csv_query {
    const struct field *fields[64];
    size_t count;
    int header, units;
};

static int parse_query(const char *spec, const char *format, struct csv_query *q) {
    char copy[1024], fmt[256];
    int csv = 0;

    q->count = 0, q->header = 1, q->units = 1;
    if (format == NULL) {
        printf("\"--format=\" switch is missing. Please run 'nvidia-smi -h' for help.\n");
        return RC_INVALID_ARGUMENT;
    }
    snprintf(fmt, sizeof fmt, "%s", format);
    for (char *save = NULL, *tok = strtok_r(fmt, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        tok += strspn(tok, " ");
        if (strcmp(tok, "csv") == 0)
            csv = 1;
        else if (strcmp(tok, "noheader") == 0)
            q->header = 0;
        else if (strcmp(tok, "nounits") == 0)
            q->units = 0;
        else {
            printf("\"%s\" is not a valid format option. Please run 'nvidia-smi -h' for help.\n", tok);
            return RC_INVALID_ARGUMENT;
        }
    }
    if (!csv) {
        printf("Only \"csv\" format is supported. Please run 'nvidia-smi -h' for help.\n");
        return RC_INVALID_ARGUMENT;
    }
    snprintf(copy, sizeof copy, "%s", spec);
    for (char *save = NULL, *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        tok += strspn(tok, " ");
        const struct field *f = find_field(tok);
        if (f == NULL) {
            printf("Field \"%s\" is not a valid field to query.\n\n", tok);
            return RC_INVALID_ARGUMENT;
        }
        if (q->count < sizeof q->fields / sizeof q->fields[0])
            q->fields[q->count++] = f;
    }
    if (q->count == 0) {
        printf("No fields to query. Please run 'nvidia-smi --help-query-gpu' for the fields.\n");
        return RC_INVALID_ARGUMENT;
    }
    return RC_OK;
}

/* --query-gpu=a,b --format=csv[,noheader][,nounits]: one line per GPU, values as NVIDIA prints them */
static int query_gpu(const struct csv_query *q, const struct gpu *gpus, unsigned int n) {
    if (q->header) {
        for (size_t i = 0; i < q->count; i++) {
            if (q->fields[i]->unit)
                printf("%s%s [%s]", i ? ", " : "", q->fields[i]->name, q->fields[i]->unit);
            else
                printf("%s%s", i ? ", " : "", q->fields[i]->name);
        }
        printf("\n");
    }
    char when[VALUE_LEN];
    timestamp(when, "%Y/%m/%d %H:%M:%S.%%03d"); /* as NVIDIA prints it: 2024/05/01 12:00:00.123 */
    for (unsigned int k = 0; k < n; k++) {
        for (size_t i = 0; i < q->count; i++) {
            char value[VALUE_LEN] = "";
            const char *out = value;
            if (q->fields[i]->get == NULL) {
                out = when;
            } else {
                nvmlReturn_t r = q->fields[i]->get(&gpus[k], q->units, value);
                if (r != NVML_SUCCESS)
                    out = error_text(r, CSV);
            }
            printf("%s%s", i ? ", " : "", out);
        }
        printf("\n");
    }
    return g_saw_lost ? RC_GPU_LOST : RC_OK;
}

/* ---- MIG devices ----------------------------------------------------------------------------- */

/* The profile ("1g.5gb") of a MIG device: NVML names a MIG device "<GPU name> MIG <profile>". */
static void mig_profile(nvmlDevice_t mig, char *buf) {
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    const char *p = NULL;
    if (nvmlDeviceGetName(mig, name, sizeof name) == NVML_SUCCESS && (p = strstr(name, "MIG ")) != NULL) {
        p += 4;
        size_t len = strcspn(p, " ");
        put(buf, "%.*s", (int)len, p);
        return;
    }
    nvmlDeviceAttributes_t a;
    if (nvmlDeviceGetAttributes_v2(mig, &a) == NVML_SUCCESS)
        put(buf, "%ug.%llugb", a.gpuInstanceSliceCount, (a.memorySizeMB + 1023) / 1024);
    else
        put(buf, "N/A");
}

/* Calls fn for each MIG device of an enabled GPU, numbered as nvidia-smi numbers them. */
typedef void (*mig_fn)(const struct gpu *g, unsigned int ordinal, nvmlDevice_t mig, void *ctx);

static unsigned int each_mig(const struct gpu *g, mig_fn fn, void *ctx) {
    unsigned int current = 0, pending = 0, max = 0, ordinal = 0;
    if (nvmlDeviceGetMigMode(g->dev, &current, &pending) != NVML_SUCCESS || current != NVML_DEVICE_MIG_ENABLE)
        return 0;
    if (nvmlDeviceGetMaxMigDeviceCount(g->dev, &max) != NVML_SUCCESS)
        return 0;
    for (unsigned int i = 0; i < max; i++) {
        nvmlDevice_t mig;
        if (nvmlDeviceGetMigDeviceHandleByIndex(g->dev, i, &mig) != NVML_SUCCESS)
            continue;
        if (fn)
            fn(g, ordinal, mig, ctx);
        ordinal++;
    }
    return ordinal;
}

/* ---- -L -------------------------------------------------------------------------------------- */

static void list_mig(const struct gpu *g, unsigned int ordinal, nvmlDevice_t mig, void *ctx) {
    char profile[VALUE_LEN], uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    (void)g, (void)ctx;
    mig_profile(mig, profile);
    nvmlReturn_t r = nvmlDeviceGetUUID(mig, uuid, sizeof uuid);
    const char *id = r == NVML_SUCCESS ? uuid : error_text(r, LOG);
    printf("  MIG %-11s Device %2u: (UUID: %s)\n", profile, ordinal, id);
}

static int list_gpus(const struct gpu *gpus, unsigned int n) {
    for (unsigned int k = 0; k < n; k++) {
        char name[VALUE_LEN], uuid[VALUE_LEN];
        nvmlReturn_t r1 = f_name(&gpus[k], 1, name), r2 = f_uuid(&gpus[k], 1, uuid);
        printf("GPU %u: %s (UUID: %s)\n", gpus[k].index, r1 == NVML_SUCCESS ? name : error_text(r1, LOG),
               r2 == NVML_SUCCESS ? uuid : error_text(r2, LOG));
        each_mig(&gpus[k], list_mig, NULL);
    }
    return RC_OK;
}

/* ---- -q -------------------------------------------------------------------------------------- */

#define LOG_KEY_WIDTH 42

static void section(int depth, const char *title) { printf("%*s%s\n", depth * 4, "", title); }

static void kv(int depth, const char *key, const char *value) {
    printf("%*s%-*s: %s\n", depth * 4, "", LOG_KEY_WIDTH - depth * 4, key, value);
}

/* key: the getter's value (units included), or NVIDIA's words for why there is none */
static void kv_get(int depth, const char *key, getter get, const struct gpu *g) {
    char value[VALUE_LEN];
    nvmlReturn_t r = get(g, 1, value);
    kv(depth, key, r == NVML_SUCCESS ? value : error_text(r, LOG));
}

static void kv_temp(int depth, const char *key, const struct gpu *g, getter get) {
    char value[VALUE_LEN];
    nvmlReturn_t r = get(g, 1, value);
    if (r == NVML_SUCCESS)
        strncat(value, " C", sizeof value - strlen(value) - 1);
    kv(depth, key, r == NVML_SUCCESS ? value : error_text(r, LOG));
}

static void log_mig(const struct gpu *g, unsigned int ordinal, nvmlDevice_t mig, void *ctx) {
    char value[VALUE_LEN];
    unsigned int gi = 0, ci = 0;
    unsigned long long mib[4];
    (void)g, (void)ctx;
    section(2, "MIG Device");
    put(value, "%u", ordinal);
    kv(3, "Index", value);
    nvmlReturn_t r = nvmlDeviceGetGpuInstanceId(mig, &gi);
    put(value, "%u", gi);
    kv(3, "GPU Instance ID", r == NVML_SUCCESS ? value : error_text(r, LOG));
    r = nvmlDeviceGetComputeInstanceId(mig, &ci);
    put(value, "%u", ci);
    kv(3, "Compute Instance ID", r == NVML_SUCCESS ? value : error_text(r, LOG));
    nvmlDeviceAttributes_t a;
    r = nvmlDeviceGetAttributes_v2(mig, &a);
    section(3, "Device Attributes");
    section(4, "Shared");
    put(value, "%u", a.multiprocessorCount);
    kv(5, "SM count", r == NVML_SUCCESS ? value : error_text(r, LOG));
    put(value, "%u", a.sharedCopyEngineCount);
    kv(5, "Copy Engine count", r == NVML_SUCCESS ? value : error_text(r, LOG));
    section(3, "FB Memory Usage");
    r = memory(mig, mib);
    static const char *const keys[] = {"Total", "Reserved", "Used", "Free"};
    for (int i = 0; i < 4; i++) {
        put(value, "%llu MiB", mib[i]);
        kv(4, keys[i], r == NVML_SUCCESS ? value : error_text(r, LOG));
    }
}

static void log_gpu(const struct gpu *g) {
    char value[VALUE_LEN], bus[VALUE_LEN];
    nvmlReturn_t r = f_bus_id(g, 1, bus);
    printf("GPU %s\n", r == NVML_SUCCESS ? bus : error_text(r, LOG));
    kv_get(1, "Product Name", f_name, g);
    kv(1, "Product Brand", "NVIDIA");
    nvmlDeviceArchitecture_t arch = NVML_DEVICE_ARCH_UNKNOWN;
    static const char *const archs[] = {"",      "",       "Kepler",       "Maxwell", "Pascal",   "Volta",
                                        "Turing", "Ampere", "Ada Lovelace", "Hopper",  "Blackwell"};
    r = nvmlDeviceGetArchitecture(g->dev, &arch);
    int known = arch < sizeof archs / sizeof archs[0] && archs[arch][0];
    kv(1, "Product Architecture", r != NVML_SUCCESS ? error_text(r, LOG) : known ? archs[arch] : "Unknown");
    kv_get(1, "Persistence Mode", f_persistence, g);
    section(1, "MIG Mode");
    kv_get(2, "Current", f_mig_current, g);
    kv_get(2, "Pending", f_mig_pending, g);
    kv_get(1, "Serial Number", f_serial, g);
    kv_get(1, "GPU UUID", f_uuid, g);
    unsigned int minor = 0;
    r = nvmlDeviceGetMinorNumber(g->dev, &minor);
    put(value, "%u", minor);
    kv(1, "Minor Number", r == NVML_SUCCESS ? value : error_text(r, LOG));
    section(1, "PCI");
    nvmlPciInfo_t pci;
    r = nvmlDeviceGetPciInfo_v3(g->dev, &pci);
    if (r == NVML_SUCCESS) {
        put(value, "0x%02X", pci.bus);
        kv(2, "Bus", value);
        put(value, "0x%02X", pci.device);
        kv(2, "Device", value);
        put(value, "0x%04X", pci.domain);
        kv(2, "Domain", value);
        put(value, "0x%08X", pci.pciDeviceId);
        kv(2, "Device Id", value);
        kv(2, "Bus Id", pci.busId);
    } else {
        kv(2, "Bus Id", error_text(r, LOG));
    }
    section(2, "GPU Link Info");
    section(3, "PCIe Generation");
    kv_get(4, "Max", f_gen_max, g);
    kv_get(4, "Current", f_gen_cur, g);
    section(3, "Link Width");
    unsigned int width = 0;
    r = nvmlDeviceGetMaxPcieLinkWidth(g->dev, &width);
    put(value, "%ux", width);
    kv(4, "Max", r == NVML_SUCCESS ? value : error_text(r, LOG));
    r = nvmlDeviceGetCurrPcieLinkWidth(g->dev, &width);
    put(value, "%ux", width);
    kv(4, "Current", r == NVML_SUCCESS ? value : error_text(r, LOG));
    kv_get(1, "Performance State", f_pstate, g);
    section(1, "FB Memory Usage");
    kv_get(2, "Total", f_mem_total, g);
    kv_get(2, "Reserved", f_mem_reserved, g);
    kv_get(2, "Used", f_mem_used, g);
    kv_get(2, "Free", f_mem_free, g);
    kv_get(1, "Compute Mode", f_compute_mode, g);
    section(1, "Utilization");
    kv_get(2, "Gpu", f_util_gpu, g);
    kv_get(2, "Memory", f_util_mem, g);
    section(1, "ECC Mode");
    kv_get(2, "Current", f_ecc_current, g);
    kv_get(2, "Pending", f_ecc_pending, g);
    section(1, "ECC Errors");
    section(2, "Volatile");
    kv_get(3, "DRAM Correctable", f_ecc_cor_vol, g);
    kv_get(3, "DRAM Uncorrectable", f_ecc_unc_vol, g);
    section(2, "Aggregate");
    kv_get(3, "DRAM Correctable", f_ecc_cor_agg, g);
    kv_get(3, "DRAM Uncorrectable", f_ecc_unc_agg, g);
    section(1, "Remapped Rows");
    unsigned int corr = 0, unc = 0, pending = 0, failure = 0;
    r = nvmlDeviceGetRemappedRows(g->dev, &corr, &unc, &pending, &failure);
    put(value, "%u", corr);
    kv(2, "Correctable Error", r == NVML_SUCCESS ? value : error_text(r, LOG));
    put(value, "%u", unc);
    kv(2, "Uncorrectable Error", r == NVML_SUCCESS ? value : error_text(r, LOG));
    kv(2, "Pending", r == NVML_SUCCESS ? (pending ? "Yes" : "No") : error_text(r, LOG));
    kv(2, "Remapping Failure Occurred", r == NVML_SUCCESS ? (failure ? "Yes" : "No") : error_text(r, LOG));
    section(1, "Temperature");
    kv_temp(2, "GPU Current Temp", g, f_temp);
    kv_temp(2, "Memory Current Temp", g, f_temp_mem);
    section(1, "GPU Power Readings");
    kv_get(2, "Power Draw", f_power_draw, g);
    kv_get(2, "Current Power Limit", f_enforced_limit, g);
    kv_get(2, "Requested Power Limit", f_power_limit, g);
    kv_get(2, "Default Power Limit", f_default_limit, g);
    section(1, "Clocks");
    kv_get(2, "Graphics", f_clock_gr, g);
    kv_get(2, "SM", f_clock_sm, g);
    kv_get(2, "Memory", f_clock_mem, g);
    section(1, "Max Clocks");
    kv_get(2, "Graphics", f_max_gr, g);
    kv_get(2, "SM", f_max_sm, g);
    kv_get(2, "Memory", f_max_mem, g);
    if (each_mig(g, NULL, NULL) > 0) {
        section(1, "MIG Devices");
        each_mig(g, log_mig, NULL);
    } else {
        kv(1, "MIG Devices", "None");
    }
    kv(1, "Processes", "None");
    printf("\n");
}

static int query(const struct gpu *gpus, unsigned int n) {
    char value[VALUE_LEN];
    printf("\n==============NVSMI LOG==============\n\n");
    timestamp(value, "%a %b %e %H:%M:%S %Y");
    kv(0, "Timestamp", value);
    driver_version(value);
    kv(0, "Driver Version", value);
    cuda_version(value);
    kv(0, "CUDA Version", value);
    kv(0, "Simulated Driver", SIMULATED_LINE);
    printf("\n");
    put(value, "%u", g_count);
    kv(0, "Attached GPUs", value);
    for (unsigned int k = 0; k < n; k++)
        log_gpu(&gpus[k]);
    return g_saw_lost ? RC_GPU_LOST : RC_OK;
}

/* ---- the default table ----------------------------------------------------------------------- */

#define W1 41
#define W2 24
#define W3 22
#define WIDE (W1 + W2 + W3 + 2)

/* one cell: " left<spaces>right " in `width` columns; a too long left is cut, ending in "..." */
static void cell(char *out, int width, const char *left, const char *right) {
    int room = width - 2 - (int)strlen(right) - (right[0] ? 1 : 0);
    char l[VALUE_LEN];
    snprintf(l, sizeof l, "%s", left);
    if (room < 3)
        room = 3;
    if ((int)strlen(l) > room)
        strcpy(l + room - 3, "...");
    snprintf(out, VALUE_LEN, " %-*s%s ", width - 2 - (int)strlen(right), l, right);
}

static void row(const char *a, const char *b, const char *c) {
    char x[VALUE_LEN], y[VALUE_LEN], z[VALUE_LEN];
    cell(x, W1, a, "");
    cell(y, W2, "", b);
    cell(z, W3, "", c);
    printf("|%s|%s|%s|\n", x, y, z);
}

/* a horizontal line: "+---+---+", "|---+---+" (under the header) or "|===+===|" */
static void rule(char left, char fill, char right, const int *widths, int n) {
    putchar(left);
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < widths[i]; j++)
            putchar(fill);
        putchar(i + 1 < n ? '+' : right);
    }
    putchar('\n');
}

static void wide(const char *text) { printf("| %-*s |\n", WIDE - 2, text); }

/* a table value with its unit glued on ("34C", "4MiB"), or "N/A" / "ERR!" */
static const char *table_value(const struct gpu *g, getter get, const char *unit, char *buf) {
    char raw[VALUE_LEN];
    nvmlReturn_t r = get(g, 0, raw);
    if (r != NVML_SUCCESS)
        return error_text(r, TABLE);
    put(buf, "%s%s", raw, unit);
    return buf;
}

static const char *table_watts(const struct gpu *g, getter get, char *buf) {
    nvmlReturn_t r = get(g, 0, buf);
    if (r != NVML_SUCCESS)
        return error_text(r, TABLE);
    put(buf, "%.0fW", atof(buf));
    return buf;
}

static void table_gpu(const struct gpu *g) {
    char v1[VALUE_LEN], v2[VALUE_LEN], v3[VALUE_LEN], left[VALUE_LEN], mid[VALUE_LEN], right[VALUE_LEN];
    char c1[VALUE_LEN], c2[VALUE_LEN], c3[VALUE_LEN];
    unsigned int fan = 0;

    const char *pm = table_value(g, f_persistence, "", v1);
    put(left, "%3u  %s", g->index, table_value(g, f_name, "", v2));
    put(right, "%-3s", strcmp(pm, "Enabled") == 0 ? "On" : strcmp(pm, "Disabled") == 0 ? "Off" : pm);
    cell(c1, W1, left, right);
    put(mid, "%s Off", table_value(g, f_bus_id, "", v1));
    cell(c2, W2, "", mid);
    cell(c3, W3, "", table_value(g, f_ecc_unc_vol, "", v1));
    printf("|%s|%s|%s|\n", c1, c2, c3);

    nvmlReturn_t r = nvmlDeviceGetFanSpeed(g->dev, &fan);
    if (r == NVML_SUCCESS)
        put(v1, "%u%%", fan);
    else
        put(v1, "%s", error_text(r, TABLE));
    put(left, "%-3s %5s    %-4s", v1, table_value(g, f_temp, "C", v2), table_value(g, f_pstate, "", v3));
    put(right, "%5s / %5s", table_watts(g, f_power_draw, v1), table_watts(g, f_power_limit, v2));
    cell(c1, W1, left, right);
    put(mid, "%s / %9s", table_value(g, f_mem_used, "MiB", v1), table_value(g, f_mem_total, "MiB", v2));
    cell(c2, W2, "", mid);
    put(left, "%7s", table_value(g, f_util_gpu, "%", v1));
    cell(c3, W3, left, table_value(g, f_compute_mode, "", v2));
    printf("|%s|%s|%s|\n", c1, c2, c3);

    row("", "", table_value(g, f_mig_current, "", v1));
}

static void table_mig(const struct gpu *g, unsigned int ordinal, nvmlDevice_t mig, void *ctx) {
    char a[VALUE_LEN], b[VALUE_LEN], c[VALUE_LEN], d[VALUE_LEN];
    unsigned int gi = 0, ci = 0;
    unsigned long long mib[4];
    nvmlDeviceAttributes_t attr;
    (void)ctx;
    nvmlDeviceGetGpuInstanceId(mig, &gi);
    nvmlDeviceGetComputeInstanceId(mig, &ci);
    put(a, " %2u  %3u %3u %3u  ", g->index, gi, ci, ordinal);
    char usage[VALUE_LEN];
    if (memory(mig, mib) == NVML_SUCCESS)
        put(usage, "%lluMiB / %6lluMiB", mib[2], mib[0]);
    else
        put(usage, "N/A");
    put(b, "%30s    ", usage);
    if (nvmlDeviceGetAttributes_v2(mig, &attr) == NVML_SUCCESS) {
        put(c, " %2u    N/A ", attr.multiprocessorCount);
        put(d, " %2u %3u  %3u  %3u  %3u ", attr.sharedCopyEngineCount, attr.sharedEncoderCount,
            attr.sharedDecoderCount, attr.sharedOfaCount, attr.sharedJpegCount);
    } else {
        put(c, " %-9s ", "N/A");
        put(d, " %-21s ", "N/A");
    }
    printf("|%-18s|%34s|%-11s|%-23s|\n", a, b, c, d);
    printf("|%18s|%34s|%11s|%23s|\n", "", "", "", "");
    static const int widths[] = {18, 34, 11, 23};
    rule('+', '-', '+', widths, 4);
}

static int table(const struct gpu *gpus, unsigned int n) {
    static const int one[] = {WIDE}, three[] = {W1, W2, W3}, migw[] = {18, 34, 11, 23};
    char when[VALUE_LEN], drv[VALUE_LEN], cuda[VALUE_LEN], line[256];
    timestamp(when, "%a %b %e %H:%M:%S %Y");
    driver_version(drv);
    cuda_version(cuda);
    printf("%s       \n", when);
    rule('+', '-', '+', one, 1);
    snprintf(line, sizeof line, "NVIDIA-SMI %-22.30s Driver Version: %-14.30s CUDA Version: %.30s", drv, drv,
             cuda);
    wide(line);
    wide(SIMULATED_LINE);
    rule('|', '-', '+', three, 3);
    printf("| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |\n");
    printf("| Fan  Temp   Perf          Pwr:Usage/Cap |           Memory-Usage | GPU-Util  Compute M. |\n");
    printf("|                                         |                        |               MIG M. |\n");
    rule('|', '=', '|', three, 3);
    unsigned int migs = 0;
    for (unsigned int k = 0; k < n; k++) {
        table_gpu(&gpus[k]);
        rule('+', '-', '+', three, 3);
        migs += each_mig(&gpus[k], NULL, NULL);
    }
    if (migs > 0) {
        printf("%*s\n", WIDE + 2, "");
        rule('+', '-', '+', one, 1);
        wide("MIG devices:");
        rule('+', '-', '+', migw, 4);
        printf("| GPU  GI  CI  MIG |                     Memory-Usage |        Vol|        Shared         |\n");
        printf("|      ID  ID  Dev |                       BAR1-Usage | SM     Unc| CE ENC  DEC  OFA  JPG |\n");
        printf("|                  |                                  |        ECC|                       |\n");
        rule('|', '=', '|', migw, 4);
        for (unsigned int k = 0; k < n; k++)
            each_mig(&gpus[k], table_mig, NULL);
    }
    printf("%*s\n", WIDE + 2, "");
    rule('+', '-', '+', one, 1);
    wide("Processes:");
    wide(" GPU   GI   CI        PID   Type   Process name                              GPU Memory");
    wide("       ID   ID                                                               Usage");
    rule('|', '=', '|', one, 1);
    wide(" No running processes found");
    rule('+', '-', '+', one, 1);
    return g_saw_lost ? RC_GPU_LOST : RC_OK;
}

/* ---- --version ------------------------------------------------------------------------------- */

static int version(void) {
    char drv[VALUE_LEN], cuda[VALUE_LEN], nvml[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE] = "";
    driver_version(drv);
    cuda_version(cuda);
    /* NVML says "12.550.90.07"; nvidia-smi prints "550.90": the API version and the patch level cut */
    const char *shown = nvml;
    if (nvmlSystemGetNVMLVersion(nvml, sizeof nvml) == NVML_SUCCESS) {
        char *first = strchr(nvml, '.'), *last = strrchr(nvml, '.');
        if (first && last > first) {
            *last = '\0';
            shown = first + 1;
        }
    }
    printf("NVIDIA-SMI version  : %s\n", drv);
    printf("NVML version        : %s\n", shown);
    printf("DRIVER version      : %s\n", drv);
    printf("CUDA Version        : %s\n", cuda);
    printf("%s\n", SIMULATED_LINE);
    return RC_OK;
}

/* ---- selecting GPUs (-i) --------------------------------------------------------------------- */

/* "3B:00.0", "0000:3B:00.0" and "00000000:3b:00.0" name the same GPU */
static int same_bus(const char *id, const nvmlPciInfo_t *pci) {
    unsigned int domain = 0, bus = 0, device = 0, function = 0;
    if (sscanf(id, "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) {
        domain = 0;
        if (sscanf(id, "%x:%x.%x", &bus, &device, &function) != 3)
            return 0;
    }
    return domain == pci->domain && bus == pci->bus && device == pci->device;
}

static int matches(const struct gpu *g, const char *id) {
    if (id[0] && strspn(id, "0123456789") == strlen(id))
        return strtoul(id, NULL, 10) == g->index;
    if (strncasecmp(id, "GPU-", 4) == 0) {
        char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
        return nvmlDeviceGetUUID(g->dev, uuid, sizeof uuid) == NVML_SUCCESS && strcasecmp(uuid, id) == 0;
    }
    nvmlPciInfo_t pci;
    return strchr(id, ':') && nvmlDeviceGetPciInfo_v3(g->dev, &pci) == NVML_SUCCESS && same_bus(id, &pci);
}

/* The GPUs -i names (a comma list of indexes, UUIDs, PCI bus ids), in NVML's order; all without -i. */
static unsigned int select_gpus(const char *ids, struct gpu *out) {
    unsigned int n = 0;
    for (unsigned int i = 0; i < g_count; i++) {
        struct gpu g = {.index = i};
        if (nvmlDeviceGetHandleByIndex_v2(i, &g.dev) != NVML_SUCCESS)
            continue;
        int wanted = ids == NULL;
        if (ids) {
            char copy[1024];
            snprintf(copy, sizeof copy, "%s", ids);
            char *save = NULL;
            for (char *tok = strtok_r(copy, ",", &save); tok && !wanted; tok = strtok_r(NULL, ",", &save))
                wanted = matches(&g, tok + strspn(tok, " "));
        }
        if (wanted)
            out[n++] = g;
    }
    return n;
}

/* ---- main ------------------------------------------------------------------------------------ */

static void usage(void) {
    printf("NVIDIA System Management Interface -- v(simulated)\n%s\n\n", SIMULATED_LINE);
    printf("nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...\n\n"
           "    -h,   --help                Print usage information and exit.\n"
           "          --version             Print version information and exit.\n"
           "    -L,   --list-gpus           Display a list of GPUs connected to the system.\n"
           "    -q,   --query               Display GPU or Unit info.\n"
           "    -i,   --id=                 Target a specific GPU (index, UUID or PCI bus id).\n"
           "    --query-gpu=                Information about GPU, e.g. --query-gpu=index,name,memory.used\n"
           "    --format=                   csv, with the modifiers noheader and nounits.\n");
}

/* "-i X", "-iX", "--id X", "--id=X": the value of an option, or NULL if `arg` is not that option */
static const char *option(int argc, char **argv, int *i, const char *shrt, const char *lng) {
    const char *arg = argv[*i];
    size_t n = strlen(lng);
    if (strncmp(arg, lng, n) == 0 && arg[n] == '=')
        return arg + n + 1;
    if ((shrt && strcmp(arg, shrt) == 0) || strcmp(arg, lng) == 0)
        return *i + 1 < argc ? argv[++*i] : "";
    if (shrt && strncmp(arg, shrt, strlen(shrt)) == 0 && arg[strlen(shrt)] != '\0')
        return arg + strlen(shrt);
    return NULL;
}

int main(int argc, char **argv) {
    int list = 0, log = 0, show_version = 0;
    const char *ids = NULL, *fields = NULL, *format = NULL, *v;

    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            usage();
            return RC_OK;
        } else if (strcmp(arg, "-L") == 0 || strcmp(arg, "--list-gpus") == 0) {
            list = 1;
        } else if (strcmp(arg, "-q") == 0 || strcmp(arg, "--query") == 0) {
            log = 1;
        } else if (strcmp(arg, "--version") == 0) {
            show_version = 1;
        } else if ((v = option(argc, argv, &i, "-i", "--id")) != NULL) {
            ids = v;
        } else if ((v = option(argc, argv, &i, NULL, "--query-gpu")) != NULL) {
            fields = v;
        } else if ((v = option(argc, argv, &i, NULL, "--format")) != NULL) {
            format = v;
        } else {
            printf("%s\n", BAD_ARGS);
            return RC_INVALID_ARGUMENT;
        }
    }
    if (list + log + (fields != NULL) + show_version > 1 || (ids && !ids[0])) {
        printf("%s\n", BAD_ARGS);
        return RC_INVALID_ARGUMENT;
    }
    struct csv_query csv = {.header = 1, .units = 1};
    if (fields) {
        int rc = parse_query(fields, format, &csv);
        if (rc != RC_OK)
            return rc;
    }

    nvmlReturn_t r = nvmlInit_v2();
    if (r != NVML_SUCCESS) {
        printf("Failed to initialize NVML: %s\n%s\n", nvmlErrorString(r), NO_DRIVER);
        return RC_DRIVER_NOT_LOADED;
    }
    if (show_version) {
        int rc = version();
        nvmlShutdown();
        return rc;
    }
    r = nvmlDeviceGetCount_v2(&g_count);
    if (r != NVML_SUCCESS) {
        printf("Unable to determine the number of GPUs: %s\n", nvmlErrorString(r));
        nvmlShutdown();
        return RC_NO_DEVICES;
    }
    struct gpu *gpus = calloc(g_count ? g_count : 1, sizeof *gpus);
    unsigned int n = gpus ? select_gpus(ids, gpus) : 0;
    int rc;
    if (n == 0) {
        printf("%s\n", NO_DEVICES);
        rc = RC_NO_DEVICES;
    } else if (list) {
        rc = list_gpus(gpus, n);
    } else if (log) {
        rc = query(gpus, n);
    } else if (fields) {
        rc = query_gpu(&csv, gpus, n);
    } else {
        rc = table(gpus, n);
    }
    free(gpus);
    nvmlShutdown();
    return rc;
}
