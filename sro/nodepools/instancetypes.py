"""The GPU instance types `sro nodepool` knows, per cloud provider: vCPUs, memory, GPUs and product.

Why a table and not a cloud API call: there is no cloud here, and the numbers go into objects the
cluster autoscaler reads to scale a pool up from zero nodes (it cannot look at a node that does not
exist yet), so they have to be right without one. Each provider's figures are from its own
documentation page, cited above its rows; memory is in MiB (GiB x 1024: AWS and Azure give GiB, GCP's
"GB" for machine types is binary too — its API reports a2-highgpu-1g as 87040 MB).

`accelerator` is the value of the `cluster-api/accelerator` node label, which the cluster autoscaler
uses as the GPU type (and OpenShift's ClusterAutoscaler `resourceLimits.gpus[].type` must match it).
The names follow GCP's accelerator type names (https://cloud.google.com/compute/docs/gpus), the one
published naming scheme, for every provider, so that one GPU model has one type cluster-wide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

Provider = Literal["aws", "gcp", "azure"]
PROVIDERS: Final[tuple[Provider, ...]] = ("aws", "gcp", "azure")

# The extended resource every type here announces through NVIDIA's device plugin (and sro's recipe
# `nvidia-gpu`); the Cluster API autoscaler's `gpu-type` capacity annotation takes this name.
NVIDIA_GPU_RESOURCE: Final = "nvidia.com/gpu"


@dataclass(frozen=True)
class InstanceType:
    name: str
    provider: Provider
    vcpus: int
    memory_mib: int
    gpus: int
    product: str  # GPU model, as the provider's page names it
    accelerator: str  # `cluster-api/accelerator` label value: the autoscaler's GPU type


V100 = ("NVIDIA Tesla V100 16GB", "nvidia-tesla-v100")
A100_40 = ("NVIDIA A100 40GB", "nvidia-tesla-a100")
A100_80 = ("NVIDIA A100 80GB", "nvidia-a100-80gb")
A10G = ("NVIDIA A10G 24GB", "nvidia-a10g")
L4 = ("NVIDIA L4 24GB", "nvidia-l4")
T4 = ("NVIDIA T4 16GB", "nvidia-tesla-t4")


def _t(name: str, provider: Provider, vcpus: int, gib: int, gpus: int, gpu: tuple[str, str]) -> InstanceType:
    return InstanceType(name, provider, vcpus, gib * 1024, gpus, gpu[0], gpu[1])


_TABLE: Final = (
    # AWS, "Accelerated computing" specifications:
    # https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html and the family pages
    # https://aws.amazon.com/ec2/instance-types/p3/ , /p4/ , /g5/ , /g4/ (memory in GiB).
    _t("p3.2xlarge", "aws", 8, 61, 1, V100),
    _t("p3.8xlarge", "aws", 32, 244, 4, V100),
    _t("p3.16xlarge", "aws", 64, 488, 8, V100),
    _t("p4d.24xlarge", "aws", 96, 1152, 8, A100_40),
    _t("g5.xlarge", "aws", 4, 16, 1, A10G),
    _t("g5.2xlarge", "aws", 8, 32, 1, A10G),
    _t("g5.12xlarge", "aws", 48, 192, 4, A10G),
    _t("g5.48xlarge", "aws", 192, 768, 8, A10G),
    _t("g4dn.xlarge", "aws", 4, 16, 1, T4),
    _t("g4dn.12xlarge", "aws", 48, 192, 4, T4),
    # GCP, accelerator-optimized machine families (A2, G2; GPUs attached by the machine type):
    # https://cloud.google.com/compute/docs/accelerator-optimized-machines
    _t("a2-highgpu-1g", "gcp", 12, 85, 1, A100_40),
    _t("a2-highgpu-2g", "gcp", 24, 170, 2, A100_40),
    _t("a2-highgpu-4g", "gcp", 48, 340, 4, A100_40),
    _t("a2-highgpu-8g", "gcp", 96, 680, 8, A100_40),
    _t("a2-ultragpu-1g", "gcp", 12, 170, 1, A100_80),
    _t("g2-standard-4", "gcp", 4, 16, 1, L4),
    _t("g2-standard-8", "gcp", 8, 32, 1, L4),
    _t("g2-standard-48", "gcp", 48, 192, 4, L4),
    # Azure, GPU-accelerated sizes (memory in GiB):
    # https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/ncv3-series
    # (NCv3 is retired on 2025-09-30: https://learn.microsoft.com/azure/virtual-machines/ncv3-nc6s-nc12s-nc24s-retirement;
    # kept for clusters that still have the quota),
    # https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/nca100v4-series ,
    # https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/ncast4v3-series
    _t("Standard_NC6s_v3", "azure", 6, 112, 1, V100),
    _t("Standard_NC12s_v3", "azure", 12, 224, 2, V100),
    _t("Standard_NC24s_v3", "azure", 24, 448, 4, V100),
    _t("Standard_NC24ads_A100_v4", "azure", 24, 220, 1, A100_80),
    _t("Standard_NC48ads_A100_v4", "azure", 48, 440, 2, A100_80),
    _t("Standard_NC96ads_A100_v4", "azure", 96, 880, 4, A100_80),
    _t("Standard_NC4as_T4_v3", "azure", 4, 28, 1, T4),
    _t("Standard_NC64as_T4_v3", "azure", 64, 440, 4, T4),
)

INSTANCE_TYPES: Final[Mapping[Provider, Mapping[str, InstanceType]]] = {
    p: {t.name: t for t in _TABLE if t.provider == p} for p in PROVIDERS
}


def lookup(provider: Provider, name: str) -> InstanceType | None:
    return INSTANCE_TYPES[provider].get(name)


def known(provider: Provider) -> tuple[str, ...]:
    return tuple(INSTANCE_TYPES[provider])
