"""Small SkyPilot ``vms.csv`` files in each layout, for the converter and the update tests.

Rows marked "real" are copied from skypilot-org/skypilot-catalog at the commits the
embedded catalog names (tools/catalog/SOURCES.md), so the expected rows can be checked
against tools/catalog/offers.csv; the others are made up to exercise one rule each.
"""

from __future__ import annotations

_L4 = (
    "\"{'Gpus': [{'Name': 'L4', 'Manufacturer': 'NVIDIA', 'Count': 1, "
    "'MemoryInfo': {'SizeInMiB': 22888}}], 'TotalGpuMemoryInMiB': 22888}\""
)

# v7 AWS: zones on their own rows; spot differs per zone (real g6.xlarge rows).
AWS_V7 = f"""\
InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone
c7g.large,,,2.0,4.0,,0.0725,0.030100,us-east-1,use1-az1
c7g.large,,,2.0,4.0,,0.0725,0.029800,us-east-1,use1-az2
g6.xlarge,L4,1.0,4.0,16.0,{_L4},0.8048,0.415500,us-east-1,use1-az1
g6.xlarge,L4,1.0,4.0,16.0,{_L4},0.8048,0.387900,us-east-1,use1-az2
g6.xlarge,L4,1.0,4.0,16.0,{_L4},0.8048,0.410200,us-east-1,use1-az4
g6.xlarge,L4,1.0,4.0,16.0,{_L4},0.8048,0.417300,us-east-1,use1-az6
g6.xlarge,L4,1.0,4.0,16.0,{_L4},0.8048,0.399000,us-west-2,usw2-az1
g6.xlarge,L4,1.0,4.0,16.0,{_L4},0.8048,,us-west-2,usw2-az2
g6.xlarge,L4,1.0,4.0,16.0,{_L4},0.8048,0.534100,us-west-2,usw2-az3
g6.xlarge,L4,1.0,4.0,16.0,{_L4},0.8048,0.412800,us-west-2,usw2-az4
inf2.xlarge,Inferentia2,1.0,4.0,16.0,,0.7582,0.2,us-east-1,use1-az1
m6i.large,,,2.0,8.0,,0.096,0.035000,us-west-2,usw2-az1
m6i.large,,,2.0,8.0,,0.096,0.034800,us-west-2,usw2-az2
m6i.large,,,2.0,8.0,,0.096,0.036100,us-west-2,usw2-az3
m6i.large,,,2.0,8.0,,0.096,,us-west-2,usw2-az4
p5e.48xlarge,H200,8.0,192.0,2048.0,,,30.5,us-east-1,use1-az1
"""
AWS_V7_EXPECTED = {
    # (machine, region): (gpu, count, price, spot, arch)
    ("c7g.large", "us-east-1"): (None, 0, 0.0725, 0.0298, "arm64"),
    ("g6.xlarge", "us-east-1"): ("L4", 1, 0.8048, 0.3879, "x86_64"),
    ("g6.xlarge", "us-west-2"): ("L4", 1, 0.8048, 0.399, "x86_64"),
    ("m6i.large", "us-west-2"): (None, 0, 0.096, 0.0348, "x86_64"),
}

_A100 = "\"{'Gpus': [{'MemoryInfo': {'SizeInMiB': 40960}}]}\""
_T4 = "\"{'Gpus': [{'MemoryInfo': {'SizeInMiB': 15360}}]}\""
# v8 GCP: hosts and GPUs on separate rows (the a2-highgpu-1g and A100 rows are real).
GCP_V8 = f"""\
InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice
a2-highgpu-1g,12.0,85.0,,,,europe-west4,europe-west4-a,0.81406,0.31824
a2-highgpu-1g,12.0,85.0,,,,europe-west4,europe-west4-b,0.81406,0.31824
a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-a,0.73948,0.36975
a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-b,0.73948,0.36975
a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-c,0.73948,0.36975
a2-highgpu-1g,12.0,85.0,,,,us-central1,us-central1-f,0.73948,0.36975
a3-edgegpu-8g-nolssd,208.0,1872.0,,,,us-central1,us-central1-a,9.46006,2.88933
a4-highgpu-8g,224.0,3968.0,,,,us-central1,us-central1-b,0.0,0.0
n1-standard-4,4.0,15.0,,,,us-central1,us-central1-a,0.189999,0.04
n1-standard-4,4.0,15.0,,,,us-central1,us-central1-b,0.189999,0.035
n2-standard-8,8.0,32.0,,,,us-central1,us-central1-a,0.388472,0.09
,,,A100,1,{_A100},europe-west4,europe-west4-a,1.61365,1.1691
,,,A100,1,{_A100},europe-west4,europe-west4-b,1.61365,1.1691
,,,A100,1,{_A100},us-central1,us-central1-a,2.93391,1.4341
,,,A100,1,{_A100},us-central1,us-central1-b,2.93391,1.4341
,,,A100,1,{_A100},us-central1,us-central1-c,2.93391,1.4341
,,,A100,1,{_A100},us-central1,us-central1-f,2.93391,1.4341
,,,B200,8,,us-central1,us-central1-b,60.0,20.0
,,,T4,1,{_T4},us-central1,us-central1-a,0.35,0.14
,,,T4,2,{_T4},us-central1,us-central1-a,0.7,
,,,tpu-v5litepod-1,1,tpu-v5litepod-1,us-central1,us-central1-a,1.2,0.24493
"""
GCP_V8_EXPECTED = {
    # (machine, gpu, count, region): (price, spot): host + GPU rows of one zone
    # host + GPU (real: 0.73948 + 2.93391, spot 0.36975 + 1.4341; in offers.csv too)
    ("a2-highgpu-1g", "A100", 1, "us-central1"): (3.67339, 1.80385),
    ("a2-highgpu-1g", "A100", 1, "europe-west4"): (2.42771, 1.48734),  # 0.81406 + 1.61365
    ("a4-highgpu-8g", "B200", 8, "us-central1"): (60.0, 20.0),  # the host's 0.0 is a price
    ("n1-standard-4", "T4", 1, "us-central1"): (0.539999, 0.18),  # zone a: 0.04 + 0.14
    ("n1-standard-4", "T4", 2, "us-central1"): (0.889999, None),  # the GPU row has no spot
    ("n1-standard-4", None, 0, "us-central1"): (0.189999, 0.035),  # n1 is sold bare too
    ("n2-standard-8", None, 0, "us-central1"): (0.388472, 0.09),
    # Not: a3-edgegpu-8g-nolssd (no H100 row in its zone), the TPU.
}

# v7 RunPod: Region is the country, AvailabilityZone the data centre; Price after SpotPrice.
RUNPOD_V7 = """\
InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Region,SpotPrice,Price,AvailabilityZone
1x_A100-80GB_SECURE,A100-80GB,1.0,8.0,80.0,A100-80GB,CA,1.19,1.64,CA-MTL-1
1x_A100-80GB_SECURE,A100-80GB,1.0,8.0,80.0,A100-80GB,CA,1.19,1.64,CA-MTL-2
1x_A100-80GB_SECURE,A100-80GB,1.0,8.0,80.0,A100-80GB,US,1.19,1.64,US-CA-1
cpu3c-2-4,,,2.0,4.0,,US,,0.06,US-TX-3
cpu3c-2-4,,,2.0,4.0,,US,,0.06,US-GA-1
"""
RUNPOD_V7_EXPECTED = {
    ("1x_A100-80GB_SECURE", "CA"): ("A100", 1, 1.64, 1.19, 80.0),
    ("1x_A100-80GB_SECURE", "US"): ("A100", 1, 1.64, 1.19, 80.0),
    ("cpu3c-2-4", "US"): (None, 0, 0.06, None, 0.0),
}

# v6 Azure: no zone column, a Generation column; Ampere (p-series) sizes are arm64.
AZURE_V6 = """\
InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,Generation
Standard_D2ps_v5,,,2.0,8,,0.077,0.0154,eastus,V2
Standard_E2as_v5,,,2.0,16,,0.128,0.01408,centralus,"V1,V2"
Standard_NC24ads_A100_v4,A100-80GB,1,24.0,220,A100-80GB,3.673,0.0,eastus,V2
"""
AZURE_V6_EXPECTED = {
    ("Standard_D2ps_v5", "eastus"): (None, 0, 0.077, 0.0154, "arm64"),
    ("Standard_E2as_v5", "centralus"): (None, 0, 0.128, 0.01408, "x86_64"),
    ("Standard_NC24ads_A100_v4", "eastus"): ("A100", 1, 3.673, None, "x86_64"),  # spot 0.0
}

# v8 vast: no zone column; GpuInfo SizeInMiB is the total of all GPUs (real rows).
VAST_V8 = """\
InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region
2x-H100_SXM-32-65536,H100,2,32,64.0,"{'Gpus': [{'Name': 'H100', 'Count': 2, 'MemoryInfo': {'SizeInMiB': 163118}}], 'TotalGpuMemoryInMiB': 163118}",3.73,0.00,"Thailand, TH, AS"
2x-RTX_4070S_Ti-32-65536,RTX4070,2,32,64.0,"{'Gpus': [{'Name': 'RTX4070', 'Count': 2, 'MemoryInfo': {'SizeInMiB': 32752}}], 'TotalGpuMemoryInMiB': 32752}",0.36,0.00,"Bulgaria, BG, EU"
"""  # noqa: E501
VAST_V8_EXPECTED = {
    ("2x-H100_SXM-32-65536", "Thailand, TH, AS"): ("H100", 2, 80.0, 3.73),
    ("2x-RTX_4070S_Ti-32-65536", "Bulgaria, BG, EU"): ("RTX 4070 Ti SUPER", 2, 16.0, 0.36),
}

# A nodus-format catalog (the SPEC section 4 columns), one bad row at line 4.
NODUS_CSV = """\
supplier,machine_id,gpu,gpu_count,gpu_memory_gb,vcpus,memory_gb,region,price_per_hour,spot_price_per_hour,arch
acme,cpu-8,,0,,8,32,us-east-1,0.25,,x86_64
acme,h100x8,H100,8,80,192,2048,us-east-1,20.5,9.9,x86_64
acme,broken,H100,8,80,192,2048,us-east-1,lots,,x86_64
acme,l4x1,L4,1,24,8,32,eu-west-1,0.7,,x86_64
"""
