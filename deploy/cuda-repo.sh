#!/bin/sh
# Adds NVIDIA's CUDA apt repository for Debian 12 (its keyring package); run
# by both stages of deploy/Containerfile before they install CUDA packages.
# curl fetches the keyring and is removed again: the image has no curl.
set -eux
apt-get update
apt-get install -y --no-install-recommends ca-certificates curl
curl -fsSLo /tmp/cuda-keyring.deb \
    https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb
dpkg -i /tmp/cuda-keyring.deb
rm /tmp/cuda-keyring.deb
apt-get purge -y curl
apt-get autoremove -y
