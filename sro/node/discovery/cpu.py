"""CPU feature source: cpuid flags, model, hardware multithreading, pstate, cstate, security.

NFD executes CPUID itself; we read the kernel's view (`/proc/cpuinfo`) through the host root so a
fake tree can describe any CPU. Linux flag names are mapped to the names NFD's cpuid library uses
(`sse4_2` -> `SSE42`, `pni` -> `SSE3`, ...) so the labels are NFD's; flags NFD does not know are
kept as raw features but not labelled. NFD's default attribute blacklist applies.
"""

from __future__ import annotations

from collections.abc import Set as AbstractSet

from sro.host.reading import HostReader
from sro.node.discovery.config import Config
from sro.node.discovery.features import Features, nfd_key
from sro.node.discovery.remembered import Remembered

NAME = "cpu"

# Linux /proc/cpuinfo flag -> NFD (klauspost/cpuid) feature name.
CPUID_NAMES = {
    "3dnow": "AMD3DNOW", "3dnowext": "AMD3DNOWEXT", "abm": "LZCNT", "adx": "ADX", "aes": "AESNI",
    "amx_bf16": "AMXBF16", "amx_fp16": "AMXFP16", "amx_int8": "AMXINT8", "amx_tile": "AMXTILE",
    "avx": "AVX", "avx2": "AVX2", "avx512_4fmaps": "AVX512FMAPS4", "avx512_4vnniw": "AVX512VNNIW4",
    "avx512_bf16": "AVX512BF16", "avx512_bitalg": "AVX512BITALG", "avx512_fp16": "AVX512FP16",
    "avx512_vbmi2": "AVX512VBMI2", "avx512_vnni": "AVX512VNNI", "avx512_vp2intersect": "AVX512VP2INTERSECT",
    "avx512_vpopcntdq": "AVX512VPOPCNTDQ", "avx512bw": "AVX512BW", "avx512cd": "AVX512CD",
    "avx512dq": "AVX512DQ", "avx512er": "AVX512ER", "avx512f": "AVX512F", "avx512ifma": "AVX512IFMA",
    "avx512pf": "AVX512PF", "avx512vbmi": "AVX512VBMI", "avx512vl": "AVX512VL", "avx_vnni": "AVXVNNI",
    "bmi1": "BMI1", "bmi2": "BMI2", "cldemote": "CLDEMOTE", "clzero": "CLZERO", "cmov": "CMOV",
    "cx16": "CX16", "cx8": "CMPXCHG8", "enqcmd": "ENQCMD", "erms": "ERMS", "f16c": "F16C", "fma": "FMA3",
    "fma4": "FMA4", "fsrm": "FSRM", "fxsr": "FXSR", "fxsr_opt": "FXSROPT", "gfni": "GFNI", "hle": "HLE",
    "ht": "HTT", "hypervisor": "HYPERVISOR", "ibpb": "IBPB", "ibrs": "IBRS", "ibt": "CETIBT",
    "lahf_lm": "LAHF", "md_clear": "MD_CLEAR", "mmx": "MMX", "mmxext": "MMXEXT", "movbe": "MOVBE",
    "movdir64b": "MOVDIR64B", "movdiri": "MOVDIRI", "mpx": "MPX", "nx": "NX", "pclmulqdq": "CLMUL",
    "pconfig": "PCONFIG", "pni": "SSE3", "popcnt": "POPCNT", "rdpid": "RDPID", "rdrand": "RDRAND",
    "rdseed": "RDSEED", "rdtscp": "RDTSCP", "rtm": "RTM", "serialize": "SERIALIZE", "sev": "SEV",
    "sev_es": "SEV_ES", "sev_snp": "SEV_SNP", "sgx": "SGX", "sgx_lc": "SGXLC", "sha_ni": "SHA",
    "shstk": "CETSS", "sme": "SME", "sse": "SSE", "sse2": "SSE2", "sse4_1": "SSE4", "sse4_2": "SSE42",
    "sse4a": "SSE4A", "ssbd": "SSBD", "ssse3": "SSSE3", "stibp": "STIBP", "svm": "SVM",
    "syscall": "SYSCALL", "tbm": "TBM", "tdx_guest": "TDX_GUEST", "tsxldtrk": "TSXLDTRK",
    "vaes": "VAES", "vmx": "VMX", "vpclmulqdq": "VPCLMULQDQ", "waitpkg": "WAITPKG",
    "wbnoinvd": "WBNOINVD", "sep": "SYSEE", "xop": "XOP", "xsave": "XSAVE", "xsavec": "XSAVEC",
    "xsaveopt": "XSAVEOPT", "xsaves": "XSAVES", "fpu": "X87", "osxsave": "OSXSAVE",
}  # fmt: skip

# x86-64 psABI microarchitecture levels, each requiring the previous one; NFD publishes them as
# cpu-cpuid.X86_64_V2..V4 so workloads built for a level can select nodes that run them.
X86_64_LEVELS = (
    ("X86_64_V2", {"CX16", "LAHF", "POPCNT", "SSE3", "SSE4", "SSE42", "SSSE3"}),
    ("X86_64_V3", {"AVX", "AVX2", "BMI1", "BMI2", "F16C", "FMA3", "LZCNT", "MOVBE", "OSXSAVE"}),
    ("X86_64_V4", {"AVX512F", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512VL"}),
)


def x86_64_levels(cpuid: set[str]) -> set[str]:
    """The levels whose features (and every lower level's) the CPU has."""
    out: set[str] = set()
    for name, required in X86_64_LEVELS:
        if not required <= cpuid:
            break
        out.add(name)
    return out


VENDORS = {"GenuineIntel": "Intel", "AuthenticAMD": "AMD", "HygonGenuine": "Hygon", "CentaurHauls": "VIA"}


def parse_cpuinfo(text: str) -> dict[str, str]:
    """The first processor block of /proc/cpuinfo as key -> value."""
    out: dict[str, str] = {}
    # only the first block is split into lines: /proc/cpuinfo has one per CPU (hundreds of KiB on
    # a large node), and the loop below stops at the first blank line anyway
    for line in text.lstrip().partition("\n\n")[0].splitlines():
        if not line.strip():
            if out:
                break
            continue
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip(), value.strip())
    return out


def _cpuid_of(_: str, line: tuple[bool, str]) -> tuple[frozenset[str], frozenset[str]]:
    """(NFD's cpuid names, the raw flags) of a `flags` line (x86) or a `Features` line (others)."""
    x86, text = line
    raw_flags = text.split()
    if x86:
        cpuid = {CPUID_NAMES[f] for f in raw_flags if f in CPUID_NAMES}
        if "XSAVE" in cpuid:  # Linux always enables XSAVE when the CPU has it: CPUID shows OSXSAVE
            cpuid.add("OSXSAVE")
        cpuid |= x86_64_levels(cpuid)
    else:  # arm64 and others: NFD labels the hwcap names upper-cased
        cpuid = {f.upper() for f in raw_flags if f.isalnum()}
    return frozenset(cpuid), frozenset(raw_flags)


# /proc/cpuinfo's text changes every pass (`cpu MHz`), its flags line only with the CPU or a
# microcode update: the names derived from it are remembered (sro.node.discovery.remembered).
_cpuid = Remembered(_cpuid_of)


# Paths below are joined as strings: a pathlib join costs more than reading a sysfs attribute.


class CpuSource:
    name = NAME

    def discover(self, reader: HostReader, config: Config) -> Features:
        cpuinfo_path = f"{reader.host.proc}/cpuinfo"
        text = reader.read_text(cpuinfo_path, required=True) or ""
        info = parse_cpuinfo(text)
        x86 = bool(info.get("flags"))
        cpuid, raw_flags = _cpuid(NAME, (x86, info.get("flags") or info.get("Features") or ""))
        if text and not raw_flags:
            reader.problem(cpuinfo_path, "no `flags` line in the first processor block")
        model: dict[str, str] = {}
        if "vendor_id" in info:
            model["vendor_id"] = VENDORS.get(info["vendor_id"], info["vendor_id"])
        for key, name in (("cpu family", "family"), ("model", "id")):
            if info.get(key, "").isdigit():
                model[name] = str(int(info[key]))
        attributes = {"model": model, "topology": self._topology(reader)}
        attributes["pstate"] = self._pstate(reader)
        attributes["cstate"] = self._cstate(reader)
        attributes["security"] = self._security(reader, cpuid)
        return Features(flags={"cpuid": cpuid, "cpuinfo_flags": raw_flags}, attributes=attributes)

    @staticmethod
    def _topology(reader: HostReader) -> dict[str, str]:
        base = f"{reader.host.sys}/bus/cpu/devices"
        cpus = reader.list_dir(base)
        for cpu in cpus:
            siblings = reader.read_value(f"{base}/{cpu}/topology/thread_siblings_list")
            if siblings is not None and ("," in siblings or "-" in siblings):
                return {"hardware_multithreading": "true"}
        return {"hardware_multithreading": "false"} if cpus else {}

    @staticmethod
    def _pstate(reader: HostReader) -> dict[str, str]:
        base = f"{reader.host.sys}/devices/system/cpu"
        status = reader.read_value(f"{base}/intel_pstate/status")
        if status is None:
            return {}
        out = {"status": status}
        if status == "off":
            return out
        no_turbo = reader.read_value(f"{base}/intel_pstate/no_turbo")
        if no_turbo is not None:
            out["turbo"] = "true" if no_turbo.startswith("0") else "false"
        if status != "active":
            return out
        governors = set()
        for policy in reader.list_dir(f"{base}/cpufreq"):
            cpus = reader.read_value(f"{base}/cpufreq/{policy}/affected_cpus")
            if not cpus:
                continue
            gov = reader.read_value(f"{base}/cpufreq/{policy}/scaling_governor")
            if gov:
                governors.add(gov)
        if len(governors) == 1:  # NFD labels the governor only when every policy agrees
            out["scaling_governor"] = governors.pop()
        return out

    @staticmethod
    def _cstate(reader: HostReader) -> dict[str, str]:
        driver = reader.read_value(f"{reader.host.sys}/devices/system/cpu/cpuidle/current_driver")
        if driver != "intel_idle":
            return {}
        path = f"{reader.host.sys}/module/intel_idle/parameters/max_cstate"
        value = reader.read_value(path)
        if value is None:
            return {}
        try:
            return {"enabled": "true" if int(value) > 0 else "false"}
        except ValueError:
            reader.problem(path, f"expected an integer, got {value[:40]!r}")
            return {}

    @staticmethod
    def _security(reader: HostReader, cpuid: AbstractSet[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        if {"SGX", "SGXLC"} <= cpuid:
            out["sgx.enabled"] = "true"
        params = f"{reader.host.sys}/module"
        # kvm_amd's three parameters only where the module is there: one lookup on other nodes
        amd = reader.exists(f"{params}/kvm_amd/parameters")
        for label, path in (
            ("sev.enabled", "kvm_amd/parameters/sev"),
            ("sev.es.enabled", "kvm_amd/parameters/sev_es"),
            ("sev.snp.enabled", "kvm_amd/parameters/sev_snp"),
            ("tdx.enabled", "kvm_intel/parameters/tdx"),
        ):
            if (amd or not path.startswith("kvm_amd/")) and reader.read_value(f"{params}/{path}") in (
                "Y",
                "1",
            ):
                out[label] = "true"
        if "TDX_GUEST" in cpuid:
            out["tdx.protected"] = "true"
        return out

    def labels(self, features: Features, config: Config) -> dict[str, str]:
        out: dict[str, str] = {}
        allow = set(config.cpuid_whitelist)
        deny = set(config.cpuid_blacklist)
        for flag in features.flags.get("cpuid", frozenset()):
            if (flag in allow) if allow else (flag not in deny):
                out[nfd_key(NAME, f"cpuid.{flag}")] = "true"
        for group, prefix in (("model", "model."), ("pstate", "pstate."), ("cstate", "cstate.")):
            for key, value in features.attributes.get(group, {}).items():
                out[nfd_key(NAME, prefix + key)] = value
        for key, value in features.attributes.get("security", {}).items():
            out[nfd_key(NAME, f"security.{key}")] = value
        ht = features.attributes.get("topology", {}).get("hardware_multithreading")
        if ht is not None:
            out[nfd_key(NAME, "hardware_multithreading")] = ht
        return out


SOURCE = CpuSource()
