# Sourced on the GPU machine by the check scripts, with `bin` set to a carry
# folder: unpacks its bin.tar.xz (stripped binaries and their Debian
# libraries) into $bin/u and points `bin` there, links the source folder the
# binaries were built in (baked in as SOURCE/build: where the tests look for
# fixtures) to this checkout, puts torch's cuDNN and the binaries' libraries
# on the loader's path.
#
#   bin=${CARRY_DIR:-.devcarry/cuda}; . tools/device/carried_bin.sh
if [ -f "$bin/bin.tar.xz" ]; then
  mkdir -p "$bin/u" && tar -xJf "$bin/bin.tar.xz" -C "$bin/u" && bin=$bin/u
fi
carried_src=$(grep -a -o -m1 -E '/work/[A-Za-z0-9_.+-]+(/[A-Za-z0-9_.+-]+)*/build' "$(ls "$bin"/cuda_*test | head -1)" |
  head -1 | sed 's|/build$||')
if [ -n "$carried_src" ] && [ ! -e "$carried_src/tests/fixtures" ]; then
  mkdir -p "$(dirname "$carried_src")" && ln -sfn "$PWD" "$carried_src"
fi
mkdir -p build
. tools/device/cudnn_env.sh
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$bin:${LD_LIBRARY_PATH:-}

# start_logs NAME: the summary file ($summary) in $logs, the GPU's name and
# clock in $logs/gpu.txt, and on exit the logs as one file, $out/NAME_logs.tgz
# (the device tool returns a handful of files, not a folder).
start_logs() {
  summary=$logs/summary.txt
  nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$logs/gpu.txt"
  finish_name=$1
  finish() { echo "t=${SECONDS}s" >> "$summary"; tar -C "$out" -czf "$out/${finish_name}_logs.tgz" logs; }
  trap finish EXIT
}
