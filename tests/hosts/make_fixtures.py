"""Writes the synthetic fake host trees under tests/hosts/<scenario>/root (run once; files are committed).

Each tree holds only the files discovery reads, with the contents real machines of that kind show
(sysfs attributes with their `0x` prefixes and trailing newlines, /proc/cpuinfo blocks, os-release,
kernel configs). `python tests/hosts/make_fixtures.py` rewrites them; the machine this project runs
on is captured instead by `scripts/capture-host`.
"""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from sro.host.capture import keep_empty_dirs

HERE = Path(__file__).parent


@dataclass
class Tree:
    root: Path
    files: dict[str, bytes] = field(default_factory=dict)

    def write(self, path: str, content: str | bytes) -> None:
        self.files[path] = content.encode() if isinstance(content, str) else content

    def dir(self, path: str) -> None:
        self.files[path.rstrip("/") + "/"] = b""

    def save(self) -> None:
        if self.root.exists():
            shutil.rmtree(self.root)
        for rel, data in sorted(self.files.items()):
            p = self.root / rel
            if rel.endswith("/"):
                p.mkdir(parents=True, exist_ok=True)
                continue
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        keep_empty_dirs(self.root)


def pci(t: Tree, addr: str, cls: str, vendor: str, device: str, sv: str, sd: str, **extra: str) -> None:
    base = f"sys/bus/pci/devices/{addr}"
    for name, value in (("class", cls), ("vendor", vendor), ("device", device)):
        t.write(f"{base}/{name}", f"0x{value}\n")
    t.write(f"{base}/subsystem_vendor", f"0x{sv}\n")
    t.write(f"{base}/subsystem_device", f"0x{sd}\n")
    t.write(f"{base}/modalias", f"pci:v0000{vendor.upper()}d0000{device.upper()}sv0000{sv.upper()}sd0000{sd.upper()}"
            f"bc{cls[:2].upper()}sc{cls[2:4].upper()}i{cls[4:].upper()}\n")  # fmt: skip
    for name, value in extra.items():
        t.write(f"{base}/{name.replace('__', '/')}", f"{value}\n")


def usb(
    t: Tree, addr: str, cls: str, vendor: str, product: str, ifaces: tuple[str, ...] = (), serial: str = ""
) -> None:
    base = f"sys/bus/usb/devices/{addr}"
    t.write(f"{base}/bDeviceClass", f"{cls}\n")
    t.write(f"{base}/idVendor", f"{vendor}\n")
    t.write(f"{base}/idProduct", f"{product}\n")
    if serial:
        t.write(f"{base}/serial", f"{serial}\n")
    for i, ic in enumerate(ifaces):
        t.write(f"{base}/{addr}:1.{i}/bInterfaceClass", f"{ic}\n")


def cpus(t: Tree, vendor: str, family: int, model: int, name: str, flags: str, n: int, siblings: str) -> None:
    blocks = []
    for i in range(n):
        blocks.append(
            f"processor\t: {i}\nvendor_id\t: {vendor}\ncpu family\t: {family}\nmodel\t\t: {model}\n"
            f"model name\t: {name}\nstepping\t: 0\ncpu MHz\t\t: 2250.000\ncache size\t: 512 KB\n"
            f"physical id\t: {i // max(1, n // 2)}\nsiblings\t: {n}\ncore id\t\t: {i}\ncpu cores\t: {n // 2}\n"
            f"flags\t\t: {flags}\nbogomips\t: 4500.00\n"
        )
    t.write("proc/cpuinfo", "\n".join(blocks) + "\n")
    for i in range(n):
        t.write(f"sys/bus/cpu/devices/cpu{i}/topology/thread_siblings_list", siblings.format(i=i) + "\n")


def os_release(t: Tree, text: str) -> None:
    t.write("etc/os-release", text)


def kconfig(opts: dict[str, str]) -> str:
    lines = ["#", "# Automatically generated file; DO NOT EDIT.", "#"]
    for k, v in opts.items():
        lines.append(f"# CONFIG_{k} is not set" if v == "n" else f"CONFIG_{k}={v}")
    return "\n".join(lines) + "\n"


ZEN2_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush mmx fxsr sse sse2 ht "
    "syscall nx mmxext fxsr_opt pdpe1gb rdtscp lm constant_tsc rep_good nopl nonstop_tsc cpuid extd_apicid "
    "aperfmperf rapl pni pclmulqdq monitor ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand "
    "lahf_lm cmp_legacy svm extapic cr8_legacy abm sse4a misalignsse 3dnowprefetch osvw ibs skinit wdt tce "
    "topoext perfctr_core perfctr_nb bpext perfctr_llc mwaitx cpb cat_l3 cdp_l3 hw_pstate ssbd mba ibrs ibpb "
    "stibp vmmcall fsgsbase bmi1 avx2 smep bmi2 cqm rdt_a rdseed adx smap clflushopt clwb sha_ni xsaveopt "
    "xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local clzero irperf xsaveerptr rdpru "
    "wbnoinvd amd_ppin arat npt lbrv svm_lock nrip_save tsc_scale vmcb_clean flushbyasid decodeassists "
    "pausefilter pfthreshold avic v_vmsave_vmload vgif v_spec_ctrl umip rdpid overflow_recov succor smca sev sev_es"
)
CASCADE_LAKE_FLAGS = (
    "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr sse sse2 "
    "ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc art arch_perfmon pebs bts rep_good nopl xtopology "
    "nonstop_tsc cpuid aperfmperf pni pclmulqdq dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr "
    "pdcm pcid dca sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm "
    "3dnowprefetch cpuid_fault epb cat_l3 cdp_l3 invpcid_single intel_ppin ssbd mba ibrs ibpb stibp ibrs_enhanced "
    "tpr_shadow vnmi flexpriority ept vpid ept_ad fsgsbase tsc_adjust bmi1 avx2 smep bmi2 erms invpcid cqm mpx "
    "rdt_a avx512f avx512dq rdseed adx smap clflushopt clwb intel_pt avx512cd avx512bw avx512vl xsaveopt xsavec "
    "xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local dtherm ida arat pln pts pku ospke "
    "avx512_vnni md_clear flush_l1d arch_capabilities"
)
ICE_LAKE_FLAGS = CASCADE_LAKE_FLAGS.replace("mpx ", "") + (
    " sha_ni avx512ifma avx512vbmi umip avx512_vbmi2 gfni vaes vpclmulqdq avx512_bitalg avx512_vpopcntdq la57 "
    "rdpid fsrm wbnoinvd split_lock_detect"
)


def nvidia_8gpu() -> Tree:
    """A DGX-A100-like server: 2x EPYC 7742, 8x A100-SXM4-40GB, 6 NVSwitches, ConnectX-6 with SR-IOV."""
    t = Tree(HERE / "nvidia-8gpu" / "root")
    cpus(t, "AuthenticAMD", 23, 49, "AMD EPYC 7742 64-Core Processor", ZEN2_FLAGS, 4, "{i},128")
    for node in ("node0", "node1"):
        t.write(
            f"sys/devices/system/node/{node}/cpulist",
            "0-63,128-191\n" if node == "node0" else "64-127,192-255\n",
        )
    t.write("sys/devices/system/node/online", "0-1\n")
    t.write("sys/devices/system/cpu/cpuidle/current_driver", "acpi_idle\n")
    gpus = ["0000:07:00.0", "0000:0f:00.0", "0000:47:00.0", "0000:4e:00.0",
            "0000:87:00.0", "0000:90:00.0", "0000:b7:00.0", "0000:bd:00.0"]  # fmt: skip
    for addr in gpus:
        pci(t, addr, "030200", "10de", "20b0", "10de", "134f", iommu_group__type="DMA")
    for i, addr in enumerate(
        ["0000:c4:00.0", "0000:c5:00.0", "0000:c6:00.0", "0000:c7:00.0", "0000:c8:00.0", "0000:c9:00.0"]
    ):
        pci(t, addr, "068000", "10de", "1af1", "10de", f"{0x1600 + i:04x}")  # NVSwitch (bridge class)
    ib = ["0000:0c:00.0", "0000:12:00.0", "0000:4b:00.0", "0000:54:00.0",
          "0000:8d:00.0", "0000:94:00.0", "0000:ba:00.0", "0000:cc:00.0"]  # fmt: skip
    for addr in ib:  # ConnectX-6 InfiniBand, SR-IOV capable, 8 VFs configured
        pci(t, addr, "020700", "15b3", "101b", "15b3", "0007", sriov_totalvfs="16", sriov_numvfs="8")
    for addr in ("0000:e1:00.0", "0000:e1:00.1"):  # ConnectX-6 Dx Ethernet, capable, none configured
        pci(t, addr, "020000", "15b3", "101d", "15b3", "0040", sriov_totalvfs="8", sriov_numvfs="0")
    pci(t, "0000:00:00.0", "060000", "1022", "1480", "1022", "1480")
    pci(t, "0000:22:00.0", "010802", "144d", "a824", "144d", "a809")
    pci(t, "0000:45:00.0", "030000", "1a03", "2000", "1a03", "2000")  # ASPEED BMC VGA
    for i, name in enumerate(("ibp12s0", "ibp18s0")):
        t.write(f"sys/class/net/{name}/device/sriov_totalvfs", "16\n")
        t.write(f"sys/class/net/{name}/device/sriov_numvfs", "8\n")
        t.write(f"sys/class/net/{name}/address", f"00:00:0{i}:fe:80:00\n")
    t.write("sys/class/net/enp225s0f0np0/device/sriov_totalvfs", "8\n")
    t.write("sys/class/net/enp225s0f0np0/device/sriov_numvfs", "0\n")
    t.dir("sys/class/net/lo")
    usb(t, "usb1", "09", "1d6b", "0002")
    usb(t, "1-1", "00", "046b", "ff01", ("ff",))  # BMC virtual media: vendor-specific interface
    usb(t, "1-2", "00", "046b", "ff10", ("03", "03"))  # BMC keyboard/mouse: HID, not whitelisted
    t.write("sys/block/nvme0n1/queue/rotational", "0\n")
    t.write("sys/block/nvme1n1/queue/rotational", "0\n")
    t.write("sys/class/dmi/id/product_name", "DGXA100\n")
    t.write("sys/class/dmi/id/sys_vendor", "NVIDIA\n")
    rel = "5.15.0-1042-nvidia"
    t.write("proc/sys/kernel/osrelease", rel + "\n")
    t.write(f"boot/config-{rel}", kconfig({"NO_HZ_COMMON": "y", "NO_HZ_IDLE": "n", "NO_HZ_FULL": "y", "NO_HZ": "y",
                                          "PREEMPT_VOLUNTARY": "y", "PREEMPT": "n", "PCI_IOV": "y", "MLX5_CORE": "m"}))  # fmt: skip
    t.write("proc/modules", "".join(f"{m} 57344 0 - Live 0x0000000000000000\n" for m in
                                    ("nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia", "mlx5_ib", "mlx5_core", "ib_core")))  # fmt: skip
    t.write(
        f"lib/modules/{rel}/modules.builtin",
        "kernel/drivers/pci/pci-stub.ko\nkernel/drivers/nvme/host/nvme.ko\n",
    )
    t.write("proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n")
    os_release(t, 'PRETTY_NAME="Ubuntu 22.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="22.04"\nVERSION="22.04.3 LTS (Jammy Jellyfish)"\n'
                  "VERSION_CODENAME=jammy\nID=ubuntu\nID_LIKE=debian\n")  # fmt: skip
    t.write("etc/kubernetes/node-feature-discovery/features.d/site",
            "# +expiry-time=2099-01-01T00:00:00Z\nrack=r12\nfabric.nvswitch=true\n# +no-label\ninternal-id=4711\n")  # fmt: skip
    return t


def cpu_only() -> Tree:
    """A CPU-only worker: 1x Xeon (Ice Lake) with SMT, Rocky Linux 9.3, SELinux enforcing, swap on."""
    t = Tree(HERE / "cpu-only" / "root")
    cpus(t, "GenuineIntel", 6, 106, "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", ICE_LAKE_FLAGS, 4, "{i},32")
    t.write("sys/devices/system/node/node0/cpulist", "0-63\n")
    t.write("sys/devices/system/cpu/intel_pstate/status", "active\n")
    t.write("sys/devices/system/cpu/intel_pstate/no_turbo", "0\n")
    for p in range(4):
        t.write(f"sys/devices/system/cpu/cpufreq/policy{p}/affected_cpus", f"{p}\n")
        t.write(f"sys/devices/system/cpu/cpufreq/policy{p}/scaling_governor", "performance\n")
    t.write("sys/devices/system/cpu/cpuidle/current_driver", "intel_idle\n")
    t.write("sys/module/intel_idle/parameters/max_cstate", "9\n")
    pci(t, "0000:00:00.0", "060000", "8086", "09a2", "8086", "0000")
    pci(t, "0000:03:00.0", "030000", "102b", "0536", "1028", "0a6f")  # Matrox G200eW3 BMC VGA
    pci(t, "0000:31:00.0", "020000", "8086", "1572", "8086", "0000", sriov_totalvfs="64", sriov_numvfs="0")
    pci(t, "0000:31:00.1", "020000", "8086", "1572", "8086", "0000", sriov_totalvfs="64", sriov_numvfs="0")
    pci(t, "0000:65:00.0", "010700", "1000", "00e6", "1028", "1fd3")  # SAS HBA
    t.write("sys/class/net/ens1f0/device/sriov_totalvfs", "64\n")
    t.write("sys/class/net/ens1f0/device/sriov_numvfs", "0\n")
    t.dir("sys/class/net/ens1f1/device")
    t.dir("sys/class/net/lo")
    t.dir("sys/class/net/cni0")
    usb(t, "usb1", "09", "1d6b", "0002")
    t.write("sys/block/sda/queue/rotational", "1\n")
    t.write("sys/block/sdb/queue/rotational", "1\n")
    t.write("sys/fs/selinux/enforce", "1\n")
    t.write("sys/class/dmi/id/product_name", "PowerEdge R650\n")
    t.write("sys/class/dmi/id/sys_vendor", "Dell Inc.\n")
    rel = "5.14.0-362.8.1.el9_3.x86_64"
    t.write("proc/sys/kernel/osrelease", rel + "\n")
    t.write(f"lib/modules/{rel}/config", kconfig({"NO_HZ_COMMON": "y", "NO_HZ_FULL": "y", "NO_HZ": "y",
                                                 "PREEMPT_VOLUNTARY": "y", "PREEMPT": "n", "SECURITY_SELINUX": "y"}))  # fmt: skip
    t.write(
        "proc/modules", "i40e 581632 0 - Live 0x0000000000000000\nxfs 2035712 3 - Live 0x0000000000000000\n"
    )
    t.write("proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n"
                          "/dev/dm-1                               partition\t8388604\t\t0\t\t-2\n")  # fmt: skip
    os_release(t, 'NAME="Rocky Linux"\nVERSION="9.3 (Blue Onyx)"\nID="rocky"\nID_LIKE="rhel centos fedora"\n'
                  'VERSION_ID="9.3"\nPLATFORM_ID="platform:el9"\nPRETTY_NAME="Rocky Linux 9.3 (Blue Onyx)"\n')  # fmt: skip
    sim = "var/lib/sro/driver/simulated-gpu/devices.json"
    t.write(sim, json.dumps(_simulated_devices(), indent=1) + "\n")
    return t


def _simulated_devices() -> dict[str, object]:
    """The simulated driver's device list (driverstate format 1): two simulated 24 GiB GPUs."""
    devs = []
    for i in range(2):
        devs.append({
            "uuid": f"GPU-5e0a1d0c-0000-4000-8000-00000000000{i}", "index": i, "minor": i,
            "deviceNode": f"/dev/sro-simgpu{i}", "pciBusId": f"0000:00:1{i}.0", "product": "SIM-GPU-24GB",
            "memoryMiB": 24576, "computeCapability": "8.6", "numaNode": 0, "nvlinks": {}, "migEnabled": False,
            "mig": [],
        })  # fmt: skip
    return {"formatVersion": 1, "simulated": True, "backend": "simulated", "driverVersion": "1.0.0", "major": 240,
            "controlNodes": [{"path": "/dev/sro-simgpuctl", "minor": 255}], "devices": devs}  # fmt: skip


def fpga_solarflare() -> Tree:
    """An edge node: 2x Xeon (Cascade Lake), Intel PAC N3000 + Xilinx Alveo (class 1200), Solarflare NIC, NVDIMM."""
    t = Tree(HERE / "fpga-solarflare" / "root")
    cpus(t, "GenuineIntel", 6, 85, "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz", CASCADE_LAKE_FLAGS, 4, "{i}")
    for node in ("node0", "node1"):
        t.write(f"sys/devices/system/node/{node}/cpulist", "0-19\n" if node == "node0" else "20-39\n")
    t.write("sys/devices/system/cpu/intel_pstate/status", "passive\n")
    t.write("sys/devices/system/cpu/intel_pstate/no_turbo", "1\n")
    t.write("sys/devices/system/cpu/cpuidle/current_driver", "intel_idle\n")
    t.write("sys/module/intel_idle/parameters/max_cstate", "0\n")
    pci(t, "0000:00:00.0", "060000", "8086", "2020", "8086", "0000")
    pci(t, "0000:3b:00.0", "120000", "8086", "0b30", "8086", "0000")  # Intel FPGA PAC N3000
    pci(t, "0000:5e:00.0", "120000", "10ee", "5005", "10ee", "000e")  # Xilinx Alveo U250 user PF
    pci(t, "0000:5e:00.1", "058000", "10ee", "5004", "10ee", "000e")  # its management PF (memory class)
    pci(t, "0000:af:00.0", "020000", "1924", "0b03", "1924", "8010", sriov_totalvfs="240", sriov_numvfs="4")
    pci(t, "0000:af:00.1", "020000", "1924", "0b03", "1924", "8010", sriov_totalvfs="240", sriov_numvfs="0")
    pci(t, "0000:03:00.0", "030000", "1a03", "2000", "1a03", "2000")
    t.write("sys/class/net/enp175s0f0np0/device/sriov_totalvfs", "240\n")
    t.write("sys/class/net/enp175s0f0np0/device/sriov_numvfs", "4\n")
    t.dir("sys/class/net/lo")
    usb(t, "usb1", "09", "1d6b", "0002")
    usb(t, "1-4", "00", "0403", "6010", ("ff", "ff"), serial="210308A1B2C3")  # FTDI JTAG on the FPGA card
    t.write("sys/bus/nd/devices/region0/devtype", "nd_region\n")
    t.write("sys/bus/nd/devices/dax0.0/devtype", "nd_dax\n")
    t.write("sys/block/sda/queue/rotational", "1\n")
    t.write("sys/class/dmi/id/product_name", "ThinkSystem SR650\n")
    rel = "5.4.0-150-generic"
    t.write("proc/sys/kernel/osrelease", rel + "\n")
    t.write("proc/config.gz", gzip.compress(kconfig({"NO_HZ_COMMON": "y", "NO_HZ_IDLE": "y", "NO_HZ": "y",
                                                     "PREEMPT": "y", "FPGA": "m", "SFC": "m"}).encode(), mtime=0))  # fmt: skip
    t.write("proc/modules", "sfc 577536 0 - Live 0x0000000000000000\nintel_fpga_pci 16384 0 - Live 0x0\n")
    t.write("proc/swaps", "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n")
    os_release(t, 'NAME="Ubuntu"\nVERSION="20.04.6 LTS (Focal Fossa)"\nID=ubuntu\nID_LIKE=debian\n'
                  'PRETTY_NAME="Ubuntu 20.04.6 LTS"\nVERSION_ID="20.04"\nVERSION_CODENAME=focal\n')  # fmt: skip
    t.write("etc/kubernetes/node-feature-discovery/features.d/fpga",
            "# written by the FPGA vendor's provisioning tool\nintel.com/fpga-bitstream=5g-vran\n"
            "# +expiry-time=2020-01-01T00:00:00Z\nstale-feature=true\n")  # fmt: skip
    return t


if __name__ == "__main__":
    for make in (nvidia_8gpu, cpu_only, fpga_solarflare):
        tree = make()
        tree.save()
        print(f"wrote {tree.root.relative_to(HERE.parent.parent)} ({len(tree.files)} files)")
