/*
 * libnvidia-ml.c - sro's simulated NVIDIA Management Library.
 *
 * What it is: a real shared object with NVML's C ABI (SONAME libnvidia-ml.so.1) that serves the
 * simulated NVIDIA driver's state instead of talking to a kernel module. Real, unmodified NVML
 * clients (nvidia-ml-py, sro's own `nvml` device backend, gpustat, the nvidia-smi next to it) load
 * it exactly as they load NVIDIA's library, so the code paths that run on real GPUs run here too.
 *
 * Where its state comes from: a text file written by Python (sro/devices/simnvml_state.py), one
 * record per line, `<kind> key=value ...` (the format is fixed in the design; see the parser
 * below). Its path is $SRO_SIMNVML_STATE, or <root>/run/sro-simnvml/state where <root> is the
 * driver root this library was loaded from (found with dladdr: strip the library directory).
 * The file is re-read whenever it changes (inode, size or mtime), so readings are live and a
 * fault injected with `sro simulate fault` reaches nvmlEventSetWait within 100 ms.
 *
 * How it behaves like NVML where clients care:
 *  - ref-counted init; NVML_ERROR_UNINITIALIZED outside init/shutdown;
 *  - a GPU is visible only when its /dev/nvidia<minor> char node (major 195) exists, as in a
 *    container ($SRO_SIMNVML_DEV_ROOT replaces /dev); indexes are renumbered over visible GPUs;
 *  - handles are pointers into this library's own static tables: validated by address before use
 *    (a foreign pointer is never dereferenced) and valid across re-reads of the state;
 *  - a lost GPU (Xid 79) answers only identity queries, everything else is GPU_IS_LOST;
 *  - MIG device handles answer what NVML answers for MIG devices, NOT_SUPPORTED for the rest;
 *  - a missing state file is NVML_ERROR_DRIVER_NOT_LOADED, a corrupt one NVML_ERROR_UNKNOWN.
 * It never prints, except to stderr when $SRO_SIMNVML_DEBUG is set, and it has no constructors:
 * nothing runs before the client calls nvmlInit.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "nvml.h"

#define EXPORT __attribute__((visibility("default")))

/* ---- limits of the simulated model -------------------------------------------------------- */
#define MAX_GPUS 64     /* state-file GPU indexes 0..63; higher ones are ignored */
#define MAX_MIGS 8      /* MIG devices per GPU (NVIDIA's maximum is 7) */
#define MAX_FAULTS 1024 /* fault records kept for event delivery */
#define MAX_EVENT_SETS 64
#define MAX_STATE_BYTES (4 << 20)
#define NVIDIA_MAJOR 195
#define MIB (1ULL << 20)
#define ALL_INSTANCES 0xFFFFFFFFU
#define EVENT_POLL_MS 50 /* how often nvmlEventSetWait looks at the state file */
#define SUPPORTED_EVENTS (nvmlEventTypeXidCriticalError | nvmlEventTypeSingleBitEccError | nvmlEventTypeDoubleBitEccError)

/* ---- debugging (silent unless asked) ------------------------------------------------------ */
static void debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void debug(const char *fmt, ...)
{
    if (getenv("SRO_SIMNVML_DEBUG") == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("simnvml: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- the model: what the state file says ---------------------------------------------------- */
struct sim_reading {
    long long util, memutil, fb_used, fb_reserved, temp, memtemp, power, energy, sm_clock, mem_clock;
    long long pcie_tx, pcie_rx, pcie_replay, ecc_sbe_vol, ecc_dbe_vol, ecc_sbe_agg, ecc_dbe_agg;
    long long remap_corr, remap_unc, remap_pending, remap_failure, enc, dec;
};

struct sim_link {
    int present, active;
    char peer_bus[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    long long tx, rx; /* KiB */
};

struct sim_mig {
    int present;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char profile[32];
    long long gi, ci, memory, cap_minor, fb_used, fb_reserved;
};

struct sim_gpu {
    int present, visible, lost, mig, numa, has_reading, nlinks;
    unsigned int visible_index, arch;
    long long minor, memory, power_limit, max_sm_clock, max_mem_clock, pcie_gen, pcie_width;
    int cc_major, cc_minor;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
    char bus[NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE];
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    char serial[NVML_DEVICE_SERIAL_BUFFER_SIZE];
    struct sim_reading r;
    struct sim_link links[NVML_NVLINK_MAX_LINKS];
    struct sim_mig migs[MAX_MIGS];
};

struct sim_fault {
    int gpu, mig;
    long long xid, seq;
};

struct sim_state {
    long long generation, cuda;
    char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE];
    char nvml[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE];
    struct sim_gpu gpus[MAX_GPUS];
    unsigned int nvisible;
    int visible_slots[MAX_GPUS]; /* visible index -> slot (state-file index) */
    int nfaults;
    long long max_seq;
    struct sim_fault faults[MAX_FAULTS];
};

/* ---- handles: fixed tables, so a handle is an address we can check ------------------------- */
struct nvmlDevice_st {
    unsigned char issued; /* handed to a client at least once */
};
struct nvmlEventSet_st {
    int used;
    long long cursor;                     /* the last fault seq delivered (or present at creation) */
    unsigned long long mask[MAX_GPUS];    /* registered event types per GPU slot */
    long long since[MAX_GPUS];            /* the largest seq present when that GPU was registered */
};

static struct nvmlDevice_st gpu_handles[MAX_GPUS];
static struct nvmlDevice_st mig_handles[MAX_GPUS][MAX_MIGS];
static struct nvmlEventSet_st event_sets[MAX_EVENT_SETS];

/* ---- library-wide state (guarded by `lock`) ------------------------------------------------ */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int init_count;
static char state_path[PATH_MAX];
static char dev_root[PATH_MAX];
static struct sim_state states[2]; /* the current one and the one being parsed */
static struct sim_state *cur = &states[0];
static nvmlReturn_t state_rc = NVML_ERROR_DRIVER_NOT_LOADED; /* the result of the last read */
static struct stat state_stat; /* identity of the file last read */
static int state_stat_valid;
static char read_buf[MAX_STATE_BYTES + 1];

/* ================================================================================================
 * Parsing the state file. Everything here works on the spare `struct sim_state` and only returns
 * success when the whole file made sense, so a half-written or damaged file never replaces a
 * good state with a partial one.
 * ============================================================================================== */

#define MAX_KV 96
struct kv {
    const char *key;
    char *val;
};
struct record {
    const char *kind;
    int n;
    struct kv kv[MAX_KV];
};

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Split one line (modified in place) into its kind and key=value pairs; -1 when malformed. */
static int split_record(char *line, struct record *rec)
{
    char *save = NULL;
    char *tok = strtok_r(line, " \t\r", &save);
    rec->n = 0;
    rec->kind = tok;
    if (tok == NULL)
        return 0;
    while ((tok = strtok_r(NULL, " \t\r", &save)) != NULL) {
        char *eq = strchr(tok, '=');
        if (eq == NULL || eq == tok || rec->n >= MAX_KV)
            return -1;
        *eq = '\0';
        rec->kv[rec->n].key = tok;
        rec->kv[rec->n].val = eq + 1;
        rec->n++;
    }
    return 0;
}

static const char *find(const struct record *rec, const char *key)
{
    for (int i = 0; i < rec->n; i++)
        if (strcmp(rec->kv[i].key, key) == 0)
            return rec->kv[i].val;
    return NULL;
}

/* A required integer in [lo, hi]; -1 when missing, not a number or out of range. */
static int get_int(const struct record *rec, const char *key, long long lo, long long hi, long long *out)
{
    const char *v = find(rec, key);
    char *end = NULL;
    if (v == NULL || *v == '\0')
        return -1;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno != 0 || *end != '\0' || x < lo || x > hi)
        return -1;
    *out = x;
    return 0;
}

/* A required string, percent-decoded into buf; -1 when missing, badly encoded or too long. */
static int get_str(const struct record *rec, const char *key, char *buf, size_t size)
{
    const char *v = find(rec, key);
    size_t o = 0;
    if (v == NULL)
        return -1;
    for (const char *p = v; *p; p++) {
        int c = (unsigned char)*p;
        if (c == '%') {
            int hi = hexval(p[1]), lo = hi < 0 ? -1 : hexval(p[2]);
            if (hi < 0 || lo < 0)
                return -1;
            c = hi * 16 + lo;
            p += 2;
        }
        if (c == 0 || o + 1 >= size)
            return -1;
        buf[o++] = (char)c;
    }
    buf[o] = '\0';
    return 0;
}

static unsigned int arch_of(const char *name)
{
    static const struct {
        const char *name;
        unsigned int arch;
    } table[] = {
        {"kepler", NVML_DEVICE_ARCH_KEPLER}, {"maxwell", NVML_DEVICE_ARCH_MAXWELL},
        {"pascal", NVML_DEVICE_ARCH_PASCAL}, {"volta", NVML_DEVICE_ARCH_VOLTA},
        {"turing", NVML_DEVICE_ARCH_TURING}, {"ampere", NVML_DEVICE_ARCH_AMPERE},
        {"ada", NVML_DEVICE_ARCH_ADA},       {"hopper", NVML_DEVICE_ARCH_HOPPER},
        {"blackwell", NVML_DEVICE_ARCH_BLACKWELL},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (strcmp(name, table[i].name) == 0)
            return table[i].arch;
    return NVML_DEVICE_ARCH_UNKNOWN;
}

static int parse_header(const struct record *rec, struct sim_state *st)
{
    long long version;
    if (get_int(rec, "version", 1, 1, &version) || get_int(rec, "generation", LLONG_MIN, LLONG_MAX, &st->generation) ||
        get_str(rec, "driver", st->driver, sizeof st->driver) || get_int(rec, "cuda", 0, INT_MAX, &st->cuda) ||
        get_str(rec, "nvml", st->nvml, sizeof st->nvml))
        return -1;
    return 0;
}

static int parse_gpu(const struct record *rec, struct sim_state *st)
{
    long long index, numa, mig, lost;
    char cc[16], arch[32];
    if (get_int(rec, "index", 0, INT_MAX, &index))
        return -1;
    if (index >= MAX_GPUS) {
        debug("GPU index %lld ignored (at most %d GPUs)", index, MAX_GPUS);
        return 0;
    }
    struct sim_gpu *g = &st->gpus[index];
    if (g->present)
        return -1; /* the same index twice */
    if (get_int(rec, "minor", 0, 254, &g->minor) || get_str(rec, "uuid", g->uuid, sizeof g->uuid) ||
        get_str(rec, "bus", g->bus, sizeof g->bus) || get_str(rec, "name", g->name, sizeof g->name) ||
        get_int(rec, "memory", 0, LLONG_MAX / (long long)MIB, &g->memory) || get_str(rec, "cc", cc, sizeof cc) ||
        get_str(rec, "arch", arch, sizeof arch) || get_int(rec, "numa", -1, INT_MAX, &numa) ||
        get_str(rec, "serial", g->serial, sizeof g->serial) || get_int(rec, "mig", 0, 1, &mig) ||
        get_int(rec, "power_limit", 0, UINT_MAX, &g->power_limit) ||
        get_int(rec, "max_sm_clock", 0, UINT_MAX, &g->max_sm_clock) ||
        get_int(rec, "max_mem_clock", 0, UINT_MAX, &g->max_mem_clock) ||
        get_int(rec, "pcie_gen", 0, 16, &g->pcie_gen) || get_int(rec, "pcie_width", 0, 64, &g->pcie_width) ||
        get_int(rec, "lost", 0, 1, &lost))
        return -1;
    if (sscanf(cc, "%d.%d", &g->cc_major, &g->cc_minor) != 2)
        return -1;
    g->arch = arch_of(arch);
    g->numa = (int)numa;
    g->mig = (int)mig;
    g->lost = (int)lost;
    g->present = 1;
    return 0;
}

/* The GPU a reading/nvlink/mig line refers to: NULL and *ok=1 when beyond MAX_GPUS (ignored),
 * NULL and *ok=0 when it names no GPU line (corrupt). */
static struct sim_gpu *gpu_of(const struct record *rec, const char *key, struct sim_state *st, int *ok)
{
    long long index;
    *ok = 0;
    if (get_int(rec, key, 0, INT_MAX, &index))
        return NULL;
    if (index >= MAX_GPUS) {
        *ok = 1;
        return NULL;
    }
    if (!st->gpus[index].present)
        return NULL;
    *ok = 1;
    return &st->gpus[index];
}

static int parse_reading(const struct record *rec, struct sim_state *st)
{
    static const char *const keys[] = {
        "util",        "memutil",     "fb_used",     "fb_reserved", "temp",       "memtemp",
        "power",       "energy",      "sm_clock",    "mem_clock",   "pcie_tx",    "pcie_rx",
        "pcie_replay", "ecc_sbe_vol", "ecc_dbe_vol", "ecc_sbe_agg", "ecc_dbe_agg", "remap_corr",
        "remap_unc",   "remap_pending", "remap_failure", "enc",      "dec",
    };
    int ok;
    struct sim_gpu *g = gpu_of(rec, "index", st, &ok);
    if (g == NULL)
        return ok ? 0 : -1;
    long long *fields = &g->r.util; /* struct sim_reading is `keys` in order, all long long */
    _Static_assert(sizeof(struct sim_reading) == sizeof(keys) / sizeof(keys[0]) * sizeof(long long),
                   "sim_reading and its keys differ");
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        if (get_int(rec, keys[i], 0, LLONG_MAX, &fields[i]))
            return -1;
    g->has_reading = 1;
    return 0;
}

static int parse_nvlink(const struct record *rec, struct sim_state *st)
{
    int ok;
    long long link, active;
    struct sim_gpu *g = gpu_of(rec, "index", st, &ok);
    if (g == NULL)
        return ok ? 0 : -1;
    if (get_int(rec, "link", 0, INT_MAX, &link))
        return -1;
    if (link >= NVML_NVLINK_MAX_LINKS)
        return 0;
    struct sim_link *l = &g->links[link];
    if (get_str(rec, "peer_bus", l->peer_bus, sizeof l->peer_bus) || get_int(rec, "active", 0, 1, &active) ||
        get_int(rec, "tx", 0, LLONG_MAX, &l->tx) || get_int(rec, "rx", 0, LLONG_MAX, &l->rx))
        return -1;
    if (!l->present)
        g->nlinks++;
    l->present = 1;
    l->active = (int)active;
    return 0;
}

static int parse_mig(const struct record *rec, struct sim_state *st)
{
    int ok;
    long long index;
    struct sim_gpu *g = gpu_of(rec, "parent", st, &ok);
    if (g == NULL)
        return ok ? 0 : -1;
    if (get_int(rec, "index", 0, INT_MAX, &index))
        return -1;
    if (index >= MAX_MIGS)
        return 0;
    struct sim_mig *m = &g->migs[index];
    if (m->present || get_str(rec, "uuid", m->uuid, sizeof m->uuid) || get_int(rec, "gi", 0, UINT_MAX, &m->gi) ||
        get_int(rec, "ci", 0, UINT_MAX, &m->ci) || get_str(rec, "profile", m->profile, sizeof m->profile) ||
        get_int(rec, "memory", 0, LLONG_MAX / (long long)MIB, &m->memory) ||
        get_int(rec, "cap_minor", 0, INT_MAX, &m->cap_minor) || get_int(rec, "fb_used", 0, LLONG_MAX, &m->fb_used) ||
        get_int(rec, "fb_reserved", 0, LLONG_MAX, &m->fb_reserved))
        return -1;
    m->present = 1;
    return 0;
}

static int parse_fault(const struct record *rec, struct sim_state *st)
{
    long long index, mig, xid, seq;
    if (get_int(rec, "index", 0, INT_MAX, &index) || get_int(rec, "mig", -1, INT_MAX, &mig) ||
        get_int(rec, "xid", 0, LLONG_MAX, &xid) || get_int(rec, "seq", 0, LLONG_MAX, &seq))
        return -1;
    if (seq > st->max_seq)
        st->max_seq = seq;
    if (index >= MAX_GPUS)
        return 0;
    struct sim_fault *f = st->nfaults < MAX_FAULTS ? &st->faults[st->nfaults++] : NULL;
    for (int i = 0; f == NULL && i < MAX_FAULTS; i++) /* full: the newest faults are the ones kept */
        if (st->faults[i].seq < seq && (f == NULL || st->faults[i].seq < f->seq))
            f = &st->faults[i];
    if (f == NULL)
        return 0;
    f->gpu = (int)index;
    f->mig = mig >= MAX_MIGS ? -1 : (int)mig;
    f->xid = xid;
    f->seq = seq;
    return 0;
}

/* Parse `text` (NUL-terminated, modified in place) into `st`: 0, or -1 when corrupt. */
static int parse_state(char *text, struct sim_state *st)
{
    int header = 0, lineno = 0;
    char *save = NULL;
    memset(st, 0, sizeof *st);
    for (char *line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        static struct record rec; /* large; only ever used under `lock` */
        int rc = 0;
        lineno++;
        if (split_record(line, &rec) != 0) {
            debug("state line %d: not `kind key=value ...`", lineno);
            return -1;
        }
        if (rec.kind == NULL)
            continue; /* a blank line */
        if (!header) {
            if (strcmp(rec.kind, "simnvml") != 0 || parse_header(&rec, st) != 0) {
                debug("state line %d: expected `simnvml version=1 ...`", lineno);
                return -1;
            }
            header = 1;
            continue;
        }
        if (strcmp(rec.kind, "gpu") == 0)
            rc = parse_gpu(&rec, st);
        else if (strcmp(rec.kind, "reading") == 0)
            rc = parse_reading(&rec, st);
        else if (strcmp(rec.kind, "nvlink") == 0)
            rc = parse_nvlink(&rec, st);
        else if (strcmp(rec.kind, "mig") == 0)
            rc = parse_mig(&rec, st);
        else if (strcmp(rec.kind, "fault") == 0)
            rc = parse_fault(&rec, st);
        /* any other kind: a newer writer's, ignored */
        if (rc != 0) {
            debug("state line %d (%s): missing or bad value", lineno, rec.kind);
            return -1;
        }
    }
    if (!header)
        debug("state: no `simnvml` header line");
    return header ? 0 : -1;
}

/* ================================================================================================
 * Loading the state: where the file is, when to re-read it, which GPUs this process can see.
 * ============================================================================================== */

/* <root>/run/sro-simnvml/state, <root> being the directory above the library directory this
 * library was loaded from (the driver root on the host, / in a container). */
static void locate_state(void)
{
    static const char *const libdirs[] = {
        "/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/lib64", "/usr/lib", "/lib",
    };
    const char *env = getenv("SRO_SIMNVML_STATE");
    const char *devs = getenv("SRO_SIMNVML_DEV_ROOT");
    snprintf(dev_root, sizeof dev_root, "%s", devs && *devs ? devs : "/dev");
    state_path[0] = '\0';
    if (env && *env) {
        snprintf(state_path, sizeof state_path, "%s", env);
        return;
    }
    Dl_info info;
    if (dladdr((void *)&nvmlInit_v2, &info) == 0 || info.dli_fname == NULL)
        return;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", info.dli_fname);
    char *slash = strrchr(dir, '/');
    if (slash == NULL)
        return;
    *slash = '\0';
    /* nvidia-smi finds the library through its RUNPATH $ORIGIN/../lib/x86_64-linux-gnu, and the
       loader then names it ".../usr/bin/../lib/...": make the directory canonical before matching */
    char real[PATH_MAX];
    if (realpath(dir, real) != NULL)
        snprintf(dir, sizeof dir, "%s", real);
    for (size_t i = 0; i < sizeof(libdirs) / sizeof(libdirs[0]); i++) {
        size_t n = strlen(dir), k = strlen(libdirs[i]);
        if (n >= k && strcmp(dir + n - k, libdirs[i]) == 0) {
            dir[n - k] = '\0';
            snprintf(state_path, sizeof state_path, "%s/run/sro-simnvml/state", dir);
            return;
        }
    }
    debug("%s is in no library directory; set SRO_SIMNVML_STATE", info.dli_fname);
}

/* Whether /dev/nvidia<minor> is NVIDIA's char device for that minor (what a container gets). */
static int node_visible(long long minor)
{
    char path[PATH_MAX + 32];
    struct stat sb;
    snprintf(path, sizeof path, "%s/nvidia%lld", dev_root, minor);
    return stat(path, &sb) == 0 && S_ISCHR(sb.st_mode) && major(sb.st_rdev) == NVIDIA_MAJOR &&
           (long long)minor(sb.st_rdev) == minor;
}

static void compute_visibility(struct sim_state *st)
{
    st->nvisible = 0;
    for (int i = 0; i < MAX_GPUS; i++) {
        struct sim_gpu *g = &st->gpus[i];
        g->visible = g->present && node_visible(g->minor);
        if (g->visible) {
            g->visible_index = st->nvisible;
            st->visible_slots[st->nvisible++] = i;
        }
    }
}

static int same_file(const struct stat *a, const struct stat *b)
{
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
           a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
           a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

/* Read the file into read_buf; the byte count, or -1 (errno set) */
static ssize_t read_state_file(struct stat *sb)
{
    FILE *f = fopen(state_path, "re");
    if (f == NULL)
        return -1;
    if (fstat(fileno(f), sb) != 0) {
        fclose(f);
        return -1;
    }
    size_t n = fread(read_buf, 1, MAX_STATE_BYTES + 1, f);
    int err = ferror(f);
    fclose(f);
    if (err) {
        errno = EIO;
        return -1;
    }
    return (ssize_t)n;
}

/* Bring `cur` up to date with the file; the result every call reports while it stands. */
static nvmlReturn_t refresh(int force)
{
    struct stat sb;
    if (state_path[0] == '\0')
        return state_rc = NVML_ERROR_DRIVER_NOT_LOADED;
    if (stat(state_path, &sb) != 0) {
        state_stat_valid = 0;
        debug("no state at %s: %s", state_path, strerror(errno));
        return state_rc = NVML_ERROR_DRIVER_NOT_LOADED;
    }
    if (!force && state_stat_valid && same_file(&sb, &state_stat))
        return state_rc;
    ssize_t n = read_state_file(&sb);
    if (n < 0) {
        state_stat_valid = 0;
        return state_rc = (errno == ENOENT ? NVML_ERROR_DRIVER_NOT_LOADED : NVML_ERROR_UNKNOWN);
    }
    state_stat = sb;
    state_stat_valid = 1;
    struct sim_state *next = cur == &states[0] ? &states[1] : &states[0];
    read_buf[n] = '\0';
    if (n > MAX_STATE_BYTES || memchr(read_buf, '\0', (size_t)n) != NULL || parse_state(read_buf, next) != 0) {
        debug("state %s is corrupt", state_path);
        return state_rc = NVML_ERROR_UNKNOWN;
    }
    compute_visibility(next);
    cur = next;
    return state_rc = NVML_SUCCESS;
}

/* ================================================================================================
 * Entering and leaving a call. Every exported function takes `lock` through begin*() and gives
 * it back through end(), so the checks every NVML call makes are in one place.
 * ============================================================================================== */

static nvmlReturn_t begin(void)
{
    pthread_mutex_lock(&lock);
    if (init_count == 0)
        return NVML_ERROR_UNINITIALIZED;
    return refresh(0);
}

static nvmlReturn_t end(nvmlReturn_t rc)
{
    pthread_mutex_unlock(&lock);
    return rc;
}

enum {
    ANY_STATE = 1, /* answered for a lost GPU too (identity) */
    MIG_OK = 2,    /* answered for a MIG device handle too */
};

struct target {
    int slot;           /* the GPU's state-file index */
    int mig;            /* the MIG slot, -1 for a whole GPU */
    struct sim_gpu *gpu;
    struct sim_mig *m;  /* NULL for a whole GPU */
};

/* Which table entry `device` is, by address only (never dereferenced before this says yes). */
static int handle_slot(nvmlDevice_t device, int *slot, int *mig)
{
    uintptr_t p = (uintptr_t)device;
    uintptr_t g0 = (uintptr_t)gpu_handles, g1 = g0 + sizeof gpu_handles;
    uintptr_t m0 = (uintptr_t)mig_handles, m1 = m0 + sizeof mig_handles;
    if (p >= g0 && p < g1 && (p - g0) % sizeof(struct nvmlDevice_st) == 0) {
        *slot = (int)((p - g0) / sizeof(struct nvmlDevice_st));
        *mig = -1;
        return 0;
    }
    if (p >= m0 && p < m1 && (p - m0) % sizeof(struct nvmlDevice_st) == 0) {
        size_t k = (p - m0) / sizeof(struct nvmlDevice_st);
        *slot = (int)(k / MAX_MIGS);
        *mig = (int)(k % MAX_MIGS);
        return 0;
    }
    return -1;
}

static nvmlDevice_t gpu_handle(int slot)
{
    gpu_handles[slot].issued = 1;
    return &gpu_handles[slot];
}

static nvmlDevice_t mig_handle(int slot, int mig)
{
    mig_handles[slot][mig].issued = 1;
    return &mig_handles[slot][mig];
}

/* Lock, check init and the handle; fill `t`. Always pair with end(). */
static nvmlReturn_t begin_device(nvmlDevice_t device, struct target *t, int flags)
{
    nvmlReturn_t rc = begin();
    if (rc != NVML_SUCCESS)
        return rc;
    if (device == NULL || handle_slot(device, &t->slot, &t->mig) != 0 || !device->issued)
        return NVML_ERROR_INVALID_ARGUMENT;
    t->gpu = &cur->gpus[t->slot];
    t->m = NULL;
    if (!t->gpu->present || !t->gpu->visible)
        return NVML_ERROR_GPU_IS_LOST; /* gone from the driver since the handle was given */
    if (t->mig >= 0) {
        if (!t->gpu->mig || !t->gpu->migs[t->mig].present)
            return NVML_ERROR_INVALID_ARGUMENT; /* that MIG device was destroyed */
        t->m = &t->gpu->migs[t->mig];
    }
    if (t->gpu->lost && !(flags & ANY_STATE))
        return NVML_ERROR_GPU_IS_LOST;
    if (t->m != NULL && !(flags & MIG_OK))
        return NVML_ERROR_NOT_SUPPORTED;
    return NVML_SUCCESS;
}

/* begin_device for a whole GPU's reading: its reading line (zeros when the writer left it out). */
static nvmlReturn_t begin_reading(nvmlDevice_t device, struct target *t, const void *out)
{
    nvmlReturn_t rc = begin_device(device, t, 0);
    if (rc == NVML_SUCCESS && out == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    return rc;
}

static nvmlReturn_t copy_out(char *dst, unsigned int length, const char *src)
{
    if (dst == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(src) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(dst, src, strlen(src) + 1);
    return NVML_SUCCESS;
}

static unsigned int clamp_uint(long long v)
{
    return v < 0 ? 0 : v > UINT_MAX ? UINT_MAX : (unsigned int)v;
}

static long long now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

/* ================================================================================================
 * Library lifetime and errors
 * ============================================================================================== */

EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int flags)
{
    (void)flags; /* NO_GPUS: zero visible GPUs never fail init here; NO_ATTACH: nothing to attach */
    pthread_mutex_lock(&lock);
    if (init_count > 0) {
        init_count++;
        return end(NVML_SUCCESS);
    }
    locate_state();
    nvmlReturn_t rc = refresh(1);
    if (rc == NVML_SUCCESS) {
        init_count = 1;
        memset(event_sets, 0, sizeof event_sets);
        debug("initialised from %s: %u visible GPU(s)", state_path, cur->nvisible);
    }
    return end(rc);
}

EXPORT nvmlReturn_t nvmlInit_v2(void)
{
    return nvmlInitWithFlags(0);
}

EXPORT nvmlReturn_t nvmlInit(void)
{
    return nvmlInitWithFlags(0);
}

EXPORT nvmlReturn_t nvmlShutdown(void)
{
    pthread_mutex_lock(&lock);
    if (init_count == 0)
        return end(NVML_ERROR_UNINITIALIZED);
    init_count--;
    return end(NVML_SUCCESS);
}

EXPORT const char *nvmlErrorString(nvmlReturn_t result)
{
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
    case NVML_ERROR_ALREADY_INITIALIZED: return "Already Initialized";
    case NVML_ERROR_NOT_FOUND: return "Not Found";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_INSUFFICIENT_POWER: return "Insufficient External Power";
    case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    case NVML_ERROR_TIMEOUT: return "Timeout";
    case NVML_ERROR_IRQ_ISSUE: return "Interrupt Request Issue";
    case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
    case NVML_ERROR_FUNCTION_NOT_FOUND: return "Function Not Found";
    case NVML_ERROR_CORRUPTED_INFOROM: return "Corrupted infoROM";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    case NVML_ERROR_RESET_REQUIRED: return "GPU requires reset";
    case NVML_ERROR_OPERATING_SYSTEM: return "GPU access blocked by the operating system";
    case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "Driver/library version mismatch";
    case NVML_ERROR_IN_USE: return "In use by another client";
    case NVML_ERROR_MEMORY: return "Insufficient Memory";
    case NVML_ERROR_NO_DATA: return "No data";
    case NVML_ERROR_VGPU_ECC_NOT_SUPPORTED:
        return "The requested vgpu operation is not available on target device, because ECC is enabled";
    case NVML_ERROR_INSUFFICIENT_RESOURCES: return "Insufficient Resources";
    case NVML_ERROR_FREQ_NOT_SUPPORTED: return "Frequency not supported";
    case NVML_ERROR_ARGUMENT_VERSION_MISMATCH: return "Argument version mismatch";
    case NVML_ERROR_DEPRECATED: return "Deprecated";
    case NVML_ERROR_NOT_READY: return "Not Ready";
    case NVML_ERROR_GPU_NOT_FOUND: return "GPU not found";
    case NVML_ERROR_INVALID_STATE: return "Invalid state";
    case NVML_ERROR_UNKNOWN: return "Unknown Error";
    default: return "Unknown Error";
    }
}

/* ================================================================================================
 * System
 * ============================================================================================== */

EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length)
{
    nvmlReturn_t rc = begin();
    return end(rc != NVML_SUCCESS ? rc : copy_out(version, length, cur->driver));
}

EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char *version, unsigned int length)
{
    nvmlReturn_t rc = begin();
    return end(rc != NVML_SUCCESS ? rc : copy_out(version, length, cur->nvml));
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion(int *cudaDriverVersion)
{
    nvmlReturn_t rc = begin();
    if (rc == NVML_SUCCESS && cudaDriverVersion == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *cudaDriverVersion = (int)cur->cuda;
    return end(rc);
}

EXPORT nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *cudaDriverVersion)
{
    return nvmlSystemGetCudaDriverVersion(cudaDriverVersion);
}

/* ================================================================================================
 * Enumeration: indexes count visible GPUs only; UUIDs and bus ids find MIG devices too.
 * ============================================================================================== */

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount)
{
    nvmlReturn_t rc = begin();
    if (rc == NVML_SUCCESS && deviceCount == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *deviceCount = cur->nvisible;
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount)
{
    return nvmlDeviceGetCount_v2(deviceCount);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device)
{
    nvmlReturn_t rc = begin();
    if (rc == NVML_SUCCESS && (device == NULL || index >= cur->nvisible))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *device = gpu_handle(cur->visible_slots[index]);
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByIndex_v2(index, device);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device)
{
    nvmlReturn_t rc = begin();
    if (rc != NVML_SUCCESS)
        return end(rc);
    if (uuid == NULL || device == NULL)
        return end(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned int v = 0; v < cur->nvisible; v++) {
        int slot = cur->visible_slots[v];
        struct sim_gpu *g = &cur->gpus[slot];
        if (strcmp(g->uuid, uuid) == 0) {
            *device = gpu_handle(slot);
            return end(NVML_SUCCESS);
        }
        for (int m = 0; g->mig && m < MAX_MIGS; m++) {
            if (g->migs[m].present && strcmp(g->migs[m].uuid, uuid) == 0) {
                *device = mig_handle(slot, m);
                return end(g->lost ? NVML_ERROR_GPU_IS_LOST : NVML_SUCCESS);
            }
        }
    }
    return end(NVML_ERROR_NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleBySerial(const char *serial, nvmlDevice_t *device)
{
    nvmlReturn_t rc = begin();
    if (rc != NVML_SUCCESS)
        return end(rc);
    if (serial == NULL || device == NULL)
        return end(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned int v = 0; v < cur->nvisible; v++) {
        int slot = cur->visible_slots[v];
        if (strcmp(cur->gpus[slot].serial, serial) == 0) {
            *device = gpu_handle(slot);
            return end(NVML_SUCCESS);
        }
    }
    return end(NVML_ERROR_NOT_FOUND);
}

/* "00000000:3B:00.0", "0000:3b:00.0" or "3b:00.0" -> domain, bus, device, function; -1 if none */
static int parse_bus_id(const char *s, unsigned int *dom, unsigned int *bus, unsigned int *dev, unsigned int *fn)
{
    int used = -1;
    *dom = 0;
    if (sscanf(s, "%x:%x:%x.%x%n", dom, bus, dev, fn, &used) == 4 && s[used] == '\0')
        return 0;
    used = -1;
    *dom = 0;
    if (sscanf(s, "%x:%x.%x%n", bus, dev, fn, &used) == 3 && s[used] == '\0')
        return 0;
    return -1;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device)
{
    unsigned int d, b, v, f, gd, gb, gv, gf;
    nvmlReturn_t rc = begin();
    if (rc != NVML_SUCCESS)
        return end(rc);
    if (pciBusId == NULL || device == NULL)
        return end(NVML_ERROR_INVALID_ARGUMENT);
    if (parse_bus_id(pciBusId, &d, &b, &v, &f) != 0)
        return end(NVML_ERROR_INVALID_ARGUMENT);
    for (unsigned int i = 0; i < cur->nvisible; i++) {
        int slot = cur->visible_slots[i];
        if (parse_bus_id(cur->gpus[slot].bus, &gd, &gb, &gv, &gf) == 0 && gd == d && gb == b && gv == v && gf == f) {
            *device = gpu_handle(slot);
            return end(NVML_SUCCESS);
        }
    }
    return end(NVML_ERROR_NOT_FOUND);
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device)
{
    return nvmlDeviceGetHandleByPciBusId_v2(pciBusId, device);
}

/* ================================================================================================
 * Identity
 * ============================================================================================== */

/* "NVIDIA A100-SXM4-40GB (simulated)" + "1g.5gb" -> "NVIDIA A100-SXM4-40GB MIG 1g.5gb (simulated)":
 * NVIDIA's MIG device name, still saying it is simulated at its end. */
static void mig_name(const struct sim_gpu *g, const struct sim_mig *m, char *out, size_t size)
{
    static const char suffix[] = " (simulated)";
    size_t n = strlen(g->name), k = sizeof suffix - 1;
    int simulated = n >= k && strcmp(g->name + n - k, suffix) == 0;
    snprintf(out, size, "%.*s MIG %s%s", (int)(simulated ? n - k : n), g->name, m->profile, simulated ? suffix : "");
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length)
{
    struct target t;
    char buf[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    nvmlReturn_t rc = begin_device(device, &t, ANY_STATE | MIG_OK);
    if (rc != NVML_SUCCESS)
        return end(rc);
    if (t.m != NULL) {
        mig_name(t.gpu, t.m, buf, sizeof buf);
        return end(copy_out(name, length, buf));
    }
    return end(copy_out(name, length, t.gpu->name));
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, ANY_STATE | MIG_OK);
    return end(rc != NVML_SUCCESS ? rc : copy_out(uuid, length, t.m ? t.m->uuid : t.gpu->uuid));
}

EXPORT nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, 0);
    return end(rc != NVML_SUCCESS ? rc : copy_out(serial, length, t.gpu->serial));
}

EXPORT nvmlReturn_t nvmlDeviceGetBoardPartNumber(nvmlDevice_t device, char *partNumber, unsigned int length)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, 0);
    return end(rc != NVML_SUCCESS ? rc : copy_out(partNumber, length, "SIMULATED"));
}

EXPORT nvmlReturn_t nvmlDeviceGetVbiosVersion(nvmlDevice_t device, char *version, unsigned int length)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, 0);
    return end(rc != NVML_SUCCESS ? rc : copy_out(version, length, "00.00.00.00.00 (simulated)"));
}

/* the simple one-number queries: a macro keeps each to what it answers */
#define UINT_QUERY(fn, flags, expr)                                                                 \
    EXPORT nvmlReturn_t fn(nvmlDevice_t device, unsigned int *out)                                   \
    {                                                                                              \
        struct target t;                                                                           \
        nvmlReturn_t rc = begin_device(device, &t, flags);                                         \
        if (rc == NVML_SUCCESS && out == NULL)                                                     \
            rc = NVML_ERROR_INVALID_ARGUMENT;                                                      \
        if (rc == NVML_SUCCESS)                                                                    \
            *out = (expr);                                                                         \
        return end(rc);                                                                            \
    }

UINT_QUERY(nvmlDeviceGetIndex, ANY_STATE, t.gpu->visible_index)
UINT_QUERY(nvmlDeviceGetMinorNumber, ANY_STATE, (unsigned int)t.gpu->minor)
UINT_QUERY(nvmlDeviceGetBoardId, 0, 0x5200U + (unsigned int)t.slot)
UINT_QUERY(nvmlDeviceGetMultiGpuBoard, 0, 0U)
UINT_QUERY(nvmlDeviceGetCurrPcieLinkGeneration, 0, (unsigned int)t.gpu->pcie_gen)
UINT_QUERY(nvmlDeviceGetCurrPcieLinkWidth, 0, (unsigned int)t.gpu->pcie_width)
UINT_QUERY(nvmlDeviceGetMaxPcieLinkGeneration, 0, (unsigned int)t.gpu->pcie_gen)
UINT_QUERY(nvmlDeviceGetGpuMaxPcieLinkGeneration, 0, (unsigned int)t.gpu->pcie_gen)
UINT_QUERY(nvmlDeviceGetMaxPcieLinkWidth, 0, (unsigned int)t.gpu->pcie_width)
UINT_QUERY(nvmlDeviceGetPcieReplayCounter, 0, clamp_uint(t.gpu->r.pcie_replay))
UINT_QUERY(nvmlDeviceGetPowerUsage, 0, clamp_uint(t.gpu->r.power))
UINT_QUERY(nvmlDeviceGetEnforcedPowerLimit, 0, (unsigned int)t.gpu->power_limit)
UINT_QUERY(nvmlDeviceGetPowerManagementLimit, 0, (unsigned int)t.gpu->power_limit)
UINT_QUERY(nvmlDeviceGetPowerManagementDefaultLimit, 0, (unsigned int)t.gpu->power_limit)
UINT_QUERY(nvmlDeviceGetGpuInstanceId, MIG_OK | ANY_STATE, t.m ? (unsigned int)t.m->gi : 0U)
UINT_QUERY(nvmlDeviceGetComputeInstanceId, MIG_OK | ANY_STATE, t.m ? (unsigned int)t.m->ci : 0U)

/* the enum-valued ones (an enum is an unsigned int in NVML's ABI) */
#define ENUM_QUERY(fn, type, flags, expr)                                                           \
    EXPORT nvmlReturn_t fn(nvmlDevice_t device, type *out)                                           \
    {                                                                                              \
        struct target t;                                                                           \
        nvmlReturn_t rc = begin_device(device, &t, flags);                                         \
        if (rc == NVML_SUCCESS && out == NULL)                                                     \
            rc = NVML_ERROR_INVALID_ARGUMENT;                                                      \
        if (rc == NVML_SUCCESS)                                                                    \
            *out = (expr);                                                                         \
        return end(rc);                                                                            \
    }

ENUM_QUERY(nvmlDeviceGetBrand, nvmlBrandType_t, MIG_OK, NVML_BRAND_NVIDIA)
ENUM_QUERY(nvmlDeviceGetArchitecture, nvmlDeviceArchitecture_t, MIG_OK, t.gpu->arch)
ENUM_QUERY(nvmlDeviceGetPersistenceMode, nvmlEnableState_t, 0, NVML_FEATURE_ENABLED)
ENUM_QUERY(nvmlDeviceGetComputeMode, nvmlComputeMode_t, 0, NVML_COMPUTEMODE_DEFAULT)
ENUM_QUERY(nvmlDeviceGetDisplayMode, nvmlEnableState_t, 0, NVML_FEATURE_DISABLED)
ENUM_QUERY(nvmlDeviceGetDisplayActive, nvmlEnableState_t, 0, NVML_FEATURE_DISABLED)
ENUM_QUERY(nvmlDeviceGetAccountingMode, nvmlEnableState_t, 0, NVML_FEATURE_DISABLED)
ENUM_QUERY(nvmlDeviceGetPowerManagementMode, nvmlEnableState_t, 0, NVML_FEATURE_ENABLED)
ENUM_QUERY(nvmlDeviceGetPerformanceState, nvmlPstates_t, 0, t.gpu->r.util > 0 ? NVML_PSTATE_0 : NVML_PSTATE_8)
ENUM_QUERY(nvmlDeviceGetPowerState, nvmlPstates_t, 0, t.gpu->r.util > 0 ? NVML_PSTATE_0 : NVML_PSTATE_8)

EXPORT nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, MIG_OK);
    if (rc == NVML_SUCCESS && (major == NULL || minor == NULL))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        *major = t.gpu->cc_major;
        *minor = t.gpu->cc_minor;
    }
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, 0);
    if (rc == NVML_SUCCESS && node == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && t.gpu->numa < 0)
        rc = NVML_ERROR_NOT_SUPPORTED; /* no NUMA affinity (a one-node host) */
    if (rc == NVML_SUCCESS)
        *node = (unsigned int)t.gpu->numa;
    return end(rc);
}

/* Streaming multiprocessors of a whole GPU, by architecture (what the common data-centre part of
 * each has); a MIG device gets its share by GPU-instance slices. */
static unsigned int sm_count(const struct sim_gpu *g)
{
    switch (g->arch) {
    case NVML_DEVICE_ARCH_VOLTA: return 80;
    case NVML_DEVICE_ARCH_TURING: return 40;
    case NVML_DEVICE_ARCH_AMPERE: return 108;
    case NVML_DEVICE_ARCH_ADA: return 142;
    case NVML_DEVICE_ARCH_HOPPER: return 132;
    case NVML_DEVICE_ARCH_BLACKWELL: return 148;
    default: return 56;
    }
}

static nvmlReturn_t attributes(nvmlDevice_t device, nvmlDeviceAttributes_t *a)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, MIG_OK);
    if (rc == NVML_SUCCESS && a == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return end(rc);
    memset(a, 0, sizeof *a);
    if (t.m == NULL) {
        a->multiprocessorCount = sm_count(t.gpu);
        a->sharedCopyEngineCount = 7;
        a->sharedDecoderCount = 5;
        a->sharedJpegCount = 1;
        a->sharedOfaCount = 1;
        a->gpuInstanceSliceCount = 7;
        a->computeInstanceSliceCount = 7;
        a->memorySizeMB = (unsigned long long)t.gpu->memory;
        return end(NVML_SUCCESS);
    }
    unsigned int slices = 1;
    if (sscanf(t.m->profile, "%ug", &slices) != 1 || slices == 0 || slices > 8)
        slices = 1;
    /* NVIDIA's slice is 14 SMs on A100, 16 on H100 (a whole GPU keeps a few back in MIG mode) */
    a->multiprocessorCount = slices * (t.gpu->arch == NVML_DEVICE_ARCH_AMPERE  ? 14
                                       : t.gpu->arch == NVML_DEVICE_ARCH_HOPPER ? 16
                                                                                : sm_count(t.gpu) / 8);
    a->sharedCopyEngineCount = slices;
    a->sharedDecoderCount = slices / 2;
    a->sharedJpegCount = slices == 7 ? 1 : 0;
    a->sharedOfaCount = slices == 7 ? 1 : 0;
    a->gpuInstanceSliceCount = slices;
    a->computeInstanceSliceCount = slices;
    a->memorySizeMB = (unsigned long long)t.m->memory;
    return end(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes_v2(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes_out)
{
    return attributes(device, attributes_out);
}

EXPORT nvmlReturn_t nvmlDeviceGetAttributes(nvmlDevice_t device, nvmlDeviceAttributes_t *attributes_out)
{
    return attributes(device, attributes_out);
}

/* ================================================================================================
 * PCI
 * ============================================================================================== */

/* The PCI device id NVIDIA's parts carry, by the product name (0 for a name not in the table). */
static unsigned int pci_device_id(const char *name)
{
    static const struct {
        const char *part;
        unsigned int id;
    } table[] = {
        /* longest names first: "A100" must not match "A10" */
        {"A100-SXM4-80GB", 0x20B2}, {"A100-SXM4-40GB", 0x20B0}, {"A100 80GB PCIe", 0x20B5},
        {"A100-PCIE-40GB", 0x20F1}, {"H100 80GB HBM3", 0x2330}, {"H100 PCIe", 0x2331},
        {"H100", 0x2330},           {"H200", 0x2335},           {"A100", 0x20B0},
        {"A30", 0x20B7},            {"A10", 0x2236},            {"L40S", 0x26B9},
        {"L40", 0x26B5},            {"L4", 0x27B8},             {"T4", 0x1EB8},
        {"V100-SXM2-32GB", 0x1DB5}, {"V100-SXM2-16GB", 0x1DB1}, {"V100", 0x1DB4},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++)
        if (strstr(name, table[i].part) != NULL)
            return table[i].id;
    return 0;
}

static void fill_pci(const char *bus_id, const char *name, nvmlPciInfo_t *pci)
{
    unsigned int d = 0, b = 0, v = 0, f = 0;
    memset(pci, 0, sizeof *pci);
    (void)parse_bus_id(bus_id, &d, &b, &v, &f);
    pci->domain = d;
    pci->bus = b;
    pci->device = v;
    pci->pciDeviceId = (pci_device_id(name) << 16) | 0x10DEU;
    pci->pciSubSystemId = (0x1000U << 16) | 0x10DEU;
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", d, b & 0xFF, v & 0xFF, f & 0xF);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X", d & 0xFFFF, b & 0xFF, v & 0xFF, f & 0xF);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, ANY_STATE | MIG_OK);
    if (rc == NVML_SUCCESS && pci == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        fill_pci(t.gpu->bus, t.gpu->name, pci);
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetPciInfo_v3(device, pci);
}

EXPORT nvmlReturn_t nvmlDeviceGetPcieThroughput(nvmlDevice_t device, nvmlPcieUtilCounter_t counter, unsigned int *value)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, value);
    if (rc == NVML_SUCCESS && counter != NVML_PCIE_UTIL_TX_BYTES && counter != NVML_PCIE_UTIL_RX_BYTES)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *value = clamp_uint(counter == NVML_PCIE_UTIL_TX_BYTES ? t.gpu->r.pcie_tx : t.gpu->r.pcie_rx);
    return end(rc);
}

/* ================================================================================================
 * Memory, utilisation, temperature, power, clocks
 * ============================================================================================== */

/* total/reserved/used in bytes of a GPU or MIG device */
static void memory_of(const struct target *t, unsigned long long *total, unsigned long long *reserved,
                      unsigned long long *used)
{
    long long tot = t->m ? t->m->memory : t->gpu->memory;
    long long res = t->m ? t->m->fb_reserved : t->gpu->r.fb_reserved;
    long long use = t->m ? t->m->fb_used : t->gpu->r.fb_used;
    if (res > tot)
        res = tot;
    if (use > tot - res)
        use = tot - res;
    *total = (unsigned long long)tot * MIB;
    *reserved = (unsigned long long)res * MIB;
    *used = (unsigned long long)use * MIB;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory)
{
    struct target t;
    unsigned long long total, reserved, used;
    nvmlReturn_t rc = begin_device(device, &t, MIG_OK);
    if (rc == NVML_SUCCESS && memory == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return end(rc);
    memory_of(&t, &total, &reserved, &used);
    memory->total = total;
    memory->used = used + reserved; /* v1 counts the driver's reservation as used */
    memory->free = total - memory->used;
    return end(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory)
{
    struct target t;
    unsigned long long total, reserved, used;
    nvmlReturn_t rc = begin_device(device, &t, MIG_OK);
    if (rc == NVML_SUCCESS && memory == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && memory->version != nvmlMemory_v2)
        rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (rc != NVML_SUCCESS)
        return end(rc);
    memory_of(&t, &total, &reserved, &used);
    memory->total = total;
    memory->reserved = reserved;
    memory->used = used;
    memory->free = total - reserved - used;
    return end(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, utilization);
    if (rc == NVML_SUCCESS) {
        utilization->gpu = clamp_uint(t.gpu->r.util);
        utilization->memory = clamp_uint(t.gpu->r.memutil);
    }
    return end(rc);
}

static nvmlReturn_t codec_utilization(nvmlDevice_t device, int encoder, unsigned int *utilization,
                                      unsigned int *samplingPeriodUs)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, utilization);
    if (rc == NVML_SUCCESS && samplingPeriodUs == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        *utilization = clamp_uint(encoder ? t.gpu->r.enc : t.gpu->r.dec);
        *samplingPeriodUs = 167000; /* NVML samples the codecs every sixth of a second */
    }
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetEncoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                    unsigned int *samplingPeriodUs)
{
    return codec_utilization(device, 1, utilization, samplingPeriodUs);
}

EXPORT nvmlReturn_t nvmlDeviceGetDecoderUtilization(nvmlDevice_t device, unsigned int *utilization,
                                                    unsigned int *samplingPeriodUs)
{
    return codec_utilization(device, 0, utilization, samplingPeriodUs);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType, unsigned int *temp)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, temp);
    if (rc == NVML_SUCCESS && sensorType != NVML_TEMPERATURE_GPU)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *temp = clamp_uint(t.gpu->r.temp);
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_v1_t *temperature)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, temperature);
    if (rc == NVML_SUCCESS && temperature->version != nvmlTemperature_v1)
        rc = NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    if (rc == NVML_SUCCESS && temperature->sensorType != NVML_TEMPERATURE_GPU)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        temperature->temperature = (int)clamp_uint(t.gpu->r.temp);
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperatureThreshold(nvmlDevice_t device, nvmlTemperatureThresholds_t thresholdType,
                                                      unsigned int *temp)
{
    /* a data-centre board's limits: shutdown, slowdown, memory max, GPU max (degrees C) */
    static const unsigned int limits[] = {92, 89, 95, 87};
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, temp);
    if (rc == NVML_SUCCESS && (unsigned int)thresholdType >= sizeof(limits) / sizeof(limits[0]))
        rc = (unsigned int)thresholdType < NVML_TEMPERATURE_THRESHOLD_COUNT ? NVML_ERROR_NOT_SUPPORTED
                                                                            : NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *temp = limits[thresholdType];
    return end(rc);
}

/* SXM boards are cooled by the chassis: NVML has no fan for them. */
static int has_fan(const struct sim_gpu *g)
{
    return strstr(g->name, "SXM") == NULL && strstr(g->name, "HBM") == NULL;
}

EXPORT nvmlReturn_t nvmlDeviceGetNumFans(nvmlDevice_t device, unsigned int *numFans)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, numFans);
    if (rc == NVML_SUCCESS)
        *numFans = has_fan(t.gpu) ? 1 : 0;
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed_v2(nvmlDevice_t device, unsigned int fan, unsigned int *speed)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, speed);
    if (rc == NVML_SUCCESS && !has_fan(t.gpu))
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS && fan != 0)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        long long pct = 30 + (t.gpu->r.temp - 30) * 2; /* a fan curve: 30% cool, 100% at 65C */
        *speed = pct < 30 ? 30 : pct > 100 ? 100 : (unsigned int)pct;
    }
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetFanSpeed(nvmlDevice_t device, unsigned int *speed)
{
    return nvmlDeviceGetFanSpeed_v2(device, 0, speed);
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerManagementLimitConstraints(nvmlDevice_t device, unsigned int *minLimit,
                                                                 unsigned int *maxLimit)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, minLimit);
    if (rc == NVML_SUCCESS && maxLimit == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) {
        *minLimit = (unsigned int)(t.gpu->power_limit / 4);
        *maxLimit = (unsigned int)t.gpu->power_limit;
    }
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long *energy)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, energy);
    if (rc == NVML_SUCCESS)
        *energy = (unsigned long long)t.gpu->r.energy;
    return end(rc);
}

/* current or maximum clock of one domain; video runs at nine tenths of graphics */
static nvmlReturn_t clock_of(const struct sim_gpu *g, nvmlClockType_t type, int max, unsigned int *mhz)
{
    long long sm = max ? g->max_sm_clock : g->r.sm_clock, mem = max ? g->max_mem_clock : g->r.mem_clock;
    switch (type) {
    case NVML_CLOCK_GRAPHICS:
    case NVML_CLOCK_SM: *mhz = clamp_uint(sm); return NVML_SUCCESS;
    case NVML_CLOCK_MEM: *mhz = clamp_uint(mem); return NVML_SUCCESS;
    case NVML_CLOCK_VIDEO: *mhz = clamp_uint(sm * 9 / 10); return NVML_SUCCESS;
    default: return NVML_ERROR_INVALID_ARGUMENT;
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, clock);
    return end(rc != NVML_SUCCESS ? rc : clock_of(t.gpu, type, 0, clock));
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxClockInfo(nvmlDevice_t device, nvmlClockType_t type, unsigned int *clock)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, clock);
    return end(rc != NVML_SUCCESS ? rc : clock_of(t.gpu, type, 1, clock));
}

/* application clocks are the maximum clocks (nobody set them lower) */
EXPORT nvmlReturn_t nvmlDeviceGetApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType, unsigned int *clockMHz)
{
    return nvmlDeviceGetMaxClockInfo(device, clockType, clockMHz);
}

EXPORT nvmlReturn_t nvmlDeviceGetDefaultApplicationsClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                          unsigned int *clockMHz)
{
    return nvmlDeviceGetMaxClockInfo(device, clockType, clockMHz);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxCustomerBoostClock(nvmlDevice_t device, nvmlClockType_t clockType,
                                                       unsigned int *clockMHz)
{
    return nvmlDeviceGetMaxClockInfo(device, clockType, clockMHz);
}

EXPORT nvmlReturn_t nvmlDeviceGetClock(nvmlDevice_t device, nvmlClockType_t clockType, nvmlClockId_t clockId,
                                       unsigned int *clockMHz)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, clockMHz);
    if (rc == NVML_SUCCESS && (unsigned int)clockId >= NVML_CLOCK_ID_COUNT)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        rc = clock_of(t.gpu, clockType, clockId != NVML_CLOCK_ID_CURRENT, clockMHz);
    return end(rc);
}

static nvmlReturn_t clock_reasons(nvmlDevice_t device, int supported, unsigned long long *reasons)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, reasons);
    if (rc == NVML_SUCCESS) {
        if (supported)
            *reasons = nvmlClocksEventReasonGpuIdle | nvmlClocksEventReasonApplicationsClocksSetting |
                       nvmlClocksEventReasonSwPowerCap | nvmlClocksEventReasonHwSlowdown |
                       nvmlClocksEventReasonSyncBoost | nvmlClocksEventReasonSwThermalSlowdown |
                       nvmlClocksEventReasonHwThermalSlowdown | nvmlClocksEventReasonHwPowerBrakeSlowdown;
        else
            *reasons = t.gpu->r.util > 0 ? nvmlClocksEventReasonNone : nvmlClocksEventReasonGpuIdle;
    }
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return clock_reasons(device, 0, reasons);
}

EXPORT nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return clock_reasons(device, 0, reasons);
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksEventReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return clock_reasons(device, 1, reasons);
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedClocksThrottleReasons(nvmlDevice_t device, unsigned long long *reasons)
{
    return clock_reasons(device, 1, reasons);
}

/* ================================================================================================
 * ECC and memory health: the counters sro simulate fault raises. Row remapping is Ampere's and
 * later's; page retirement the older GPUs' (NVML answers NOT_SUPPORTED for the other one).
 * ============================================================================================== */

static int remaps_rows(const struct sim_gpu *g)
{
    return g->arch != NVML_DEVICE_ARCH_UNKNOWN && g->arch >= NVML_DEVICE_ARCH_AMPERE;
}

EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current, nvmlEnableState_t *pending)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, 0);
    if (rc == NVML_SUCCESS && (current == NULL || pending == NULL))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *current = *pending = NVML_FEATURE_ENABLED;
    return end(rc);
}

static long long ecc_total(const struct sim_gpu *g, nvmlMemoryErrorType_t errorType, nvmlEccCounterType_t counterType)
{
    if (errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED)
        return counterType == NVML_VOLATILE_ECC ? g->r.ecc_sbe_vol : g->r.ecc_sbe_agg;
    return counterType == NVML_VOLATILE_ECC ? g->r.ecc_dbe_vol : g->r.ecc_dbe_agg;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                nvmlEccCounterType_t counterType, unsigned long long *eccCounts)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, eccCounts);
    if (rc == NVML_SUCCESS && ((unsigned int)errorType >= NVML_MEMORY_ERROR_TYPE_COUNT ||
                               (unsigned int)counterType >= NVML_ECC_COUNTER_TYPE_COUNT))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *eccCounts = (unsigned long long)ecc_total(t.gpu, errorType, counterType);
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryErrorCounter(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                    nvmlEccCounterType_t counterType,
                                                    nvmlMemoryLocation_t locationType, unsigned long long *count)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, count);
    if (rc == NVML_SUCCESS && ((unsigned int)errorType >= NVML_MEMORY_ERROR_TYPE_COUNT ||
                               (unsigned int)counterType >= NVML_ECC_COUNTER_TYPE_COUNT ||
                               (unsigned int)locationType >= NVML_MEMORY_LOCATION_COUNT))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) /* every simulated error is in device memory */
        *count = locationType == NVML_MEMORY_LOCATION_DEVICE_MEMORY
                     ? (unsigned long long)ecc_total(t.gpu, errorType, counterType)
                     : 0ULL;
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows, unsigned int *uncRows,
                                              unsigned int *isPending, unsigned int *failureOccurred)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, corrRows);
    if (rc == NVML_SUCCESS && (uncRows == NULL || isPending == NULL || failureOccurred == NULL))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && !remaps_rows(t.gpu))
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS) {
        *corrRows = clamp_uint(t.gpu->r.remap_corr);
        *uncRows = clamp_uint(t.gpu->r.remap_unc);
        *isPending = t.gpu->r.remap_pending ? 1 : 0;
        *failureOccurred = t.gpu->r.remap_failure ? 1 : 0;
    }
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                                 unsigned int *pageCount, unsigned long long *addresses,
                                                 unsigned long long *timestamps)
{
    struct target t;
    (void)addresses;
    (void)timestamps; /* never written: no page is ever retired here */
    nvmlReturn_t rc = begin_reading(device, &t, pageCount);
    if (rc == NVML_SUCCESS && (unsigned int)cause >= NVML_PAGE_RETIREMENT_CAUSE_COUNT)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && remaps_rows(t.gpu))
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS)
        *pageCount = 0;
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                              unsigned int *pageCount, unsigned long long *addresses)
{
    return nvmlDeviceGetRetiredPages_v2(device, cause, pageCount, addresses, NULL);
}

EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t *isPending)
{
    struct target t;
    nvmlReturn_t rc = begin_reading(device, &t, isPending);
    if (rc == NVML_SUCCESS && remaps_rows(t.gpu))
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS)
        *isPending = NVML_FEATURE_DISABLED;
    return end(rc);
}

/* ================================================================================================
 * Processes: the simulated GPUs run no process NVML could name, so every list is empty (which
 * NVML reports as success with a count of zero, whatever the buffer).
 * ============================================================================================== */

static nvmlReturn_t no_processes(nvmlDevice_t device, unsigned int *infoCount)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, MIG_OK);
    if (rc == NVML_SUCCESS && infoCount == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *infoCount = 0;
    return end(rc);
}

#define NO_PROCESSES(fn, type)                                                                      \
    EXPORT nvmlReturn_t fn(nvmlDevice_t device, unsigned int *infoCount, type *infos)               \
    {                                                                                              \
        (void)infos;                                                                               \
        return no_processes(device, infoCount);                                                    \
    }

NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t)
NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t)
NO_PROCESSES(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t)
NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t)
NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t)
NO_PROCESSES(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t)
NO_PROCESSES(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t)

/* ================================================================================================
 * NVLink: the links the state lists. A GPU with none has no NVLink (NOT_SUPPORTED, as NVML says
 * for a PCIe board); a link number past the GPU's links is NOT_SUPPORTED too.
 * ============================================================================================== */

static unsigned int nvlink_version(const struct sim_gpu *g)
{
    switch (g->arch) {
    case NVML_DEVICE_ARCH_PASCAL: return NVML_NVLINK_VERSION_1_0;
    case NVML_DEVICE_ARCH_VOLTA: return NVML_NVLINK_VERSION_2_0;
    case NVML_DEVICE_ARCH_HOPPER: return NVML_NVLINK_VERSION_4_0;
    case NVML_DEVICE_ARCH_BLACKWELL: return NVML_NVLINK_VERSION_5_0;
    default: return NVML_NVLINK_VERSION_3_0; /* Ampere's */
    }
}

/* begin_device plus the link: *l set on success */
static nvmlReturn_t begin_link(nvmlDevice_t device, unsigned int link, struct target *t, const void *out,
                               const struct sim_link **l)
{
    nvmlReturn_t rc = begin_device(device, t, 0);
    if (rc != NVML_SUCCESS)
        return rc;
    if (out == NULL || link >= NVML_NVLINK_MAX_LINKS)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (t->gpu->nlinks == 0 || !t->gpu->links[link].present)
        return NVML_ERROR_NOT_SUPPORTED;
    *l = &t->gpu->links[link];
    return NVML_SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t *isActive)
{
    struct target t;
    const struct sim_link *l;
    nvmlReturn_t rc = begin_link(device, link, &t, isActive, &l);
    if (rc == NVML_SUCCESS)
        *isActive = l->active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link, unsigned int *version)
{
    struct target t;
    const struct sim_link *l;
    nvmlReturn_t rc = begin_link(device, link, &t, version, &l);
    if (rc == NVML_SUCCESS)
        *version = nvlink_version(t.gpu);
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkCapability(nvmlDevice_t device, unsigned int link,
                                                  nvmlNvLinkCapability_t capability, unsigned int *capResult)
{
    struct target t;
    const struct sim_link *l;
    nvmlReturn_t rc = begin_link(device, link, &t, capResult, &l);
    if (rc == NVML_SUCCESS && (unsigned int)capability >= NVML_NVLINK_CAP_COUNT)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS) /* GPU-to-GPU links: peer access and atomics, no system memory, no SLI */
        *capResult = capability == NVML_NVLINK_CAP_P2P_SUPPORTED || capability == NVML_NVLINK_CAP_P2P_ATOMICS ||
                     capability == NVML_NVLINK_CAP_VALID;
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    struct target t;
    const struct sim_link *l;
    nvmlReturn_t rc = begin_link(device, link, &t, pci, &l);
    if (rc != NVML_SUCCESS)
        return end(rc);
    const char *peer_name = "";
    unsigned int d, b, v, f, pd, pb, pv, pf;
    if (parse_bus_id(l->peer_bus, &pd, &pb, &pv, &pf) == 0) {
        for (int i = 0; i < MAX_GPUS; i++) /* the peer's own name gives its PCI device id */
            if (cur->gpus[i].present && parse_bus_id(cur->gpus[i].bus, &d, &b, &v, &f) == 0 && d == pd &&
                b == pb && v == pv && f == pf)
                peer_name = cur->gpus[i].name;
    }
    fill_pci(l->peer_bus, peer_name, pci);
    return end(NVML_SUCCESS);
}

EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link, nvmlPciInfo_t *pci)
{
    return nvmlDeviceGetNvLinkRemotePciInfo_v2(device, link, pci);
}

/* ================================================================================================
 * Field values: the fields NVIDIA's tools and DCGM ask NVML for; a field the simulated model has
 * no value for gets NOT_SUPPORTED in its own nvmlReturn, as NVML does, and the call succeeds.
 * ============================================================================================== */

static void set_ull(nvmlFieldValue_t *v, long long x)
{
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
    v->value.ullVal = x < 0 ? 0ULL : (unsigned long long)x;
}

static void set_uint(nvmlFieldValue_t *v, long long x)
{
    v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
    v->value.uiVal = clamp_uint(x);
}

/* one NVLink counter: scopeId picks the link, UINT_MAX all of them */
static nvmlReturn_t link_counter(const struct sim_gpu *g, unsigned int scope, int rx, int raw, long long *out)
{
    long long sum = 0;
    if (g->nlinks == 0)
        return NVML_ERROR_NOT_SUPPORTED;
    for (unsigned int i = 0; i < NVML_NVLINK_MAX_LINKS; i++) {
        if (!g->links[i].present || (scope != UINT_MAX && scope != i))
            continue;
        long long kib = rx ? g->links[i].rx : g->links[i].tx;
        sum += raw ? kib + kib / 16 : kib; /* raw counts the protocol's overhead too */
    }
    if (scope != UINT_MAX && (scope >= NVML_NVLINK_MAX_LINKS || !g->links[scope].present))
        return NVML_ERROR_INVALID_ARGUMENT;
    *out = sum;
    return NVML_SUCCESS;
}

static nvmlReturn_t field_value(const struct sim_gpu *g, nvmlFieldValue_t *v)
{
    const struct sim_reading *r = &g->r;
    long long x = 0;
    nvmlReturn_t rc;
    switch (v->fieldId) {
    case NVML_FI_DEV_ECC_CURRENT:
    case NVML_FI_DEV_ECC_PENDING: set_uint(v, 1); return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_SBE_VOL_TOTAL: set_ull(v, r->ecc_sbe_vol); return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_DBE_VOL_TOTAL: set_ull(v, r->ecc_dbe_vol); return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_SBE_AGG_TOTAL: set_ull(v, r->ecc_sbe_agg); return NVML_SUCCESS;
    case NVML_FI_DEV_ECC_DBE_AGG_TOTAL: set_ull(v, r->ecc_dbe_agg); return NVML_SUCCESS;
    case NVML_FI_DEV_MEMORY_TEMP: set_uint(v, r->memtemp); return NVML_SUCCESS;
    case NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
    case NVML_FI_DEV_ENERGY: set_ull(v, r->energy); return NVML_SUCCESS;
    case NVML_FI_DEV_PCIE_REPLAY_COUNTER: set_ull(v, r->pcie_replay); return NVML_SUCCESS;
    case NVML_FI_DEV_POWER_AVERAGE:
    case NVML_FI_DEV_POWER_INSTANT: set_uint(v, r->power); return NVML_SUCCESS;
    case NVML_FI_DEV_POWER_CURRENT_LIMIT: set_uint(v, g->power_limit); return NVML_SUCCESS;
    case NVML_FI_DEV_REMAPPED_COR:
    case NVML_FI_DEV_REMAPPED_UNC:
    case NVML_FI_DEV_REMAPPED_PENDING:
    case NVML_FI_DEV_REMAPPED_FAILURE:
        if (!remaps_rows(g))
            return NVML_ERROR_NOT_SUPPORTED;
        x = v->fieldId == NVML_FI_DEV_REMAPPED_COR ? r->remap_corr
            : v->fieldId == NVML_FI_DEV_REMAPPED_UNC ? r->remap_unc
            : v->fieldId == NVML_FI_DEV_REMAPPED_PENDING ? r->remap_pending
                                                          : r->remap_failure;
        set_uint(v, x);
        return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_LINK_COUNT:
        if (g->nlinks == 0)
            return NVML_ERROR_NOT_SUPPORTED;
        set_uint(v, g->nlinks);
        return NVML_SUCCESS;
    case NVML_FI_DEV_NVLINK_BANDWIDTH_C0_TOTAL:
    case NVML_FI_DEV_NVLINK_BANDWIDTH_C1_TOTAL: {
        long long tx = 0, rx = 0;
        if ((rc = link_counter(g, UINT_MAX, 0, 0, &tx)) != NVML_SUCCESS ||
            (rc = link_counter(g, UINT_MAX, 1, 0, &rx)) != NVML_SUCCESS)
            return rc;
        set_ull(v, tx + rx);
        return NVML_SUCCESS;
    }
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX:
    case NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX:
        rc = link_counter(g, v->scopeId,
                          v->fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX ||
                              v->fieldId == NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_RX,
                          v->fieldId >= NVML_FI_DEV_NVLINK_THROUGHPUT_RAW_TX, &x);
        if (rc == NVML_SUCCESS)
            set_ull(v, x);
        return rc;
    case NVML_FI_DEV_NVLINK_GET_STATE:
    case NVML_FI_DEV_NVLINK_GET_VERSION:
        if (g->nlinks == 0)
            return NVML_ERROR_NOT_SUPPORTED;
        if (v->scopeId >= NVML_NVLINK_MAX_LINKS || !g->links[v->scopeId].present)
            return NVML_ERROR_INVALID_ARGUMENT;
        set_uint(v, v->fieldId == NVML_FI_DEV_NVLINK_GET_STATE ? (unsigned int)g->links[v->scopeId].active : nvlink_version(g));
        return NVML_SUCCESS;
    default: return NVML_ERROR_NOT_SUPPORTED;
    }
}

EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t *values)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, 0);
    if (rc == NVML_SUCCESS && (values == NULL || valuesCount <= 0))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return end(rc);
    long long now = now_us();
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = now;
        v->latencyUsec = 0;
        v->value.ullVal = 0;
        v->valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
        v->nvmlReturn = field_value(t.gpu, v);
    }
    return end(NVML_SUCCESS);
}

/* ================================================================================================
 * MIG: a GPU in MIG mode exposes the MIG devices the state lists, by their index there.
 * ============================================================================================== */

static int mig_capable(const struct sim_gpu *g)
{
    return g->mig || (g->arch != NVML_DEVICE_ARCH_UNKNOWN && g->arch >= NVML_DEVICE_ARCH_AMPERE &&
                      g->arch != NVML_DEVICE_ARCH_ADA);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *currentMode, unsigned int *pendingMode)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, 0);
    if (rc == NVML_SUCCESS && (currentMode == NULL || pendingMode == NULL))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && !mig_capable(t.gpu))
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS)
        *currentMode = *pendingMode = t.gpu->mig ? NVML_DEVICE_MIG_ENABLE : NVML_DEVICE_MIG_DISABLE;
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, 0);
    if (rc == NVML_SUCCESS && count == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && !mig_capable(t.gpu))
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS) {
        unsigned int n = 7; /* NVIDIA's seven GPU-instance slices; more if the state lists more */
        for (unsigned int m = 0; m < MAX_MIGS; m++)
            if (t.gpu->migs[m].present && m + 1 > n)
                n = m + 1;
        *count = n;
    }
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                        nvmlDevice_t *migDevice)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, 0);
    if (rc == NVML_SUCCESS && migDevice == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && !mig_capable(t.gpu))
        rc = NVML_ERROR_NOT_SUPPORTED;
    if (rc == NVML_SUCCESS && !t.gpu->mig)
        rc = NVML_ERROR_INVALID_ARGUMENT; /* not in MIG mode */
    if (rc == NVML_SUCCESS && index >= MAX_MIGS)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS && !t.gpu->migs[index].present)
        rc = NVML_ERROR_NOT_FOUND;
    if (rc == NVML_SUCCESS)
        *migDevice = mig_handle(t.slot, (int)index);
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t migDevice, nvmlDevice_t *device)
{
    struct target t;
    nvmlReturn_t rc = begin_device(migDevice, &t, MIG_OK | ANY_STATE);
    if (rc == NVML_SUCCESS && (device == NULL || t.m == NULL))
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *device = gpu_handle(t.slot);
    return end(rc);
}

EXPORT nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *isMigDevice)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, MIG_OK | ANY_STATE);
    if (rc == NVML_SUCCESS && isMigDevice == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *isMigDevice = t.m != NULL;
    return end(rc);
}

/* ================================================================================================
 * Events: Xid critical errors from the state's `fault` lines. A set delivers each fault of a GPU
 * registered with it whose seq is newer than the newest present at registration, oldest first;
 * waiting polls the state file (re-read when it changes) until one arrives or the timeout passes.
 * ============================================================================================== */

static int event_set_index(nvmlEventSet_t set)
{
    uintptr_t p = (uintptr_t)set, s0 = (uintptr_t)event_sets, s1 = s0 + sizeof event_sets;
    if (p < s0 || p >= s1 || (p - s0) % sizeof(struct nvmlEventSet_st) != 0)
        return -1;
    int i = (int)((p - s0) / sizeof(struct nvmlEventSet_st));
    return event_sets[i].used ? i : -1;
}

EXPORT nvmlReturn_t nvmlDeviceGetSupportedEventTypes(nvmlDevice_t device, unsigned long long *eventTypes)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, MIG_OK);
    if (rc == NVML_SUCCESS && eventTypes == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc == NVML_SUCCESS)
        *eventTypes = SUPPORTED_EVENTS;
    return end(rc);
}

EXPORT nvmlReturn_t nvmlEventSetCreate(nvmlEventSet_t *set)
{
    nvmlReturn_t rc = begin();
    if (rc == NVML_SUCCESS && set == NULL)
        rc = NVML_ERROR_INVALID_ARGUMENT;
    if (rc != NVML_SUCCESS)
        return end(rc);
    for (int i = 0; i < MAX_EVENT_SETS; i++) {
        if (!event_sets[i].used) {
            memset(&event_sets[i], 0, sizeof event_sets[i]);
            event_sets[i].used = 1;
            event_sets[i].cursor = cur->max_seq;
            *set = &event_sets[i];
            return end(NVML_SUCCESS);
        }
    }
    return end(NVML_ERROR_INSUFFICIENT_RESOURCES);
}

EXPORT nvmlReturn_t nvmlDeviceRegisterEvents(nvmlDevice_t device, unsigned long long eventTypes, nvmlEventSet_t set)
{
    struct target t;
    nvmlReturn_t rc = begin_device(device, &t, MIG_OK);
    if (rc != NVML_SUCCESS)
        return end(rc);
    int s = event_set_index(set);
    if (s < 0)
        return end(NVML_ERROR_INVALID_ARGUMENT);
    if (eventTypes & ~(unsigned long long)SUPPORTED_EVENTS)
        return end(NVML_ERROR_NOT_SUPPORTED);
    event_sets[s].mask[t.slot] |= eventTypes; /* a MIG device's events come through its GPU */
    if (event_sets[s].since[t.slot] < cur->max_seq)
        event_sets[s].since[t.slot] = cur->max_seq;
    return end(NVML_SUCCESS);
}

/* The oldest undelivered fault for set `s`, or NULL. */
static const struct sim_fault *next_fault(const struct nvmlEventSet_st *es)
{
    const struct sim_fault *best = NULL;
    for (int i = 0; i < cur->nfaults; i++) {
        const struct sim_fault *f = &cur->faults[i];
        if (!(es->mask[f->gpu] & nvmlEventTypeXidCriticalError) || f->seq <= es->cursor ||
            f->seq <= es->since[f->gpu] || !cur->gpus[f->gpu].visible)
            continue;
        if (best == NULL || f->seq < best->seq)
            best = f;
    }
    return best;
}

static long long monotonic_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

EXPORT nvmlReturn_t nvmlEventSetWait_v2(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    long long deadline = monotonic_ms() + timeoutms;
    for (;;) {
        nvmlReturn_t rc = begin();
        if (rc != NVML_SUCCESS)
            return end(rc);
        int s = event_set_index(set);
        if (s < 0 || data == NULL)
            return end(NVML_ERROR_INVALID_ARGUMENT);
        const struct sim_fault *f = next_fault(&event_sets[s]);
        if (f != NULL) {
            const struct sim_gpu *g = &cur->gpus[f->gpu];
            memset(data, 0, sizeof *data);
            data->device = gpu_handle(f->gpu);
            data->eventType = nvmlEventTypeXidCriticalError;
            data->eventData = (unsigned long long)f->xid;
            data->gpuInstanceId = data->computeInstanceId = ALL_INSTANCES;
            if (f->mig >= 0 && g->migs[f->mig].present) {
                data->gpuInstanceId = (unsigned int)g->migs[f->mig].gi;
                data->computeInstanceId = (unsigned int)g->migs[f->mig].ci;
            }
            event_sets[s].cursor = f->seq;
            debug("event: GPU %d Xid %lld (seq %lld)", f->gpu, f->xid, f->seq);
            return end(NVML_SUCCESS);
        }
        end(NVML_SUCCESS);
        long long left = deadline - monotonic_ms();
        if (left <= 0)
            return NVML_ERROR_TIMEOUT;
        struct timespec nap = {0, (left < EVENT_POLL_MS ? left : EVENT_POLL_MS) * 1000000L};
        nanosleep(&nap, NULL);
    }
}

EXPORT nvmlReturn_t nvmlEventSetWait(nvmlEventSet_t set, nvmlEventData_t *data, unsigned int timeoutms)
{
    return nvmlEventSetWait_v2(set, data, timeoutms);
}

EXPORT nvmlReturn_t nvmlEventSetFree(nvmlEventSet_t set)
{
    nvmlReturn_t rc = begin();
    if (rc != NVML_SUCCESS)
        return end(rc);
    int s = event_set_index(set);
    if (s < 0)
        return end(NVML_ERROR_INVALID_ARGUMENT);
    event_sets[s].used = 0;
    return end(NVML_SUCCESS);
}
