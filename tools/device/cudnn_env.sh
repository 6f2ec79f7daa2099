# Sourced on the GPU machine: puts torch's cuDNN 9.19 (the version the
# development machines build against) before the system's 9.14 on the
# loader's path (../shared/DEVICE.md).
#
#   . tools/device/cudnn_env.sh
for d in /opt/torch/.venv/lib/python3*/site-packages/nvidia/cudnn/lib; do
  [ -e "$d/libcudnn.so.9" ] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}" && break
done
