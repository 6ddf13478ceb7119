# The default job of tests/vm/run.py, sourced inside the VM by guest.sh with
# SANDBOXD, SBX_HELPERS and SBX_SRC (the checkout) set. Its exit code is the
# test's.
# A layout as systemd makes it: the root gives its children memory, pids and
# cpu, and each daemon gets a cgroup of its own below sbx-tests/ (sbxtest's
# SBX_DAEMON_CGROUPS), where it is alone.
echo "+memory +pids +cpu" >/sys/fs/cgroup/cgroup.subtree_control || exit 1
mkdir /sys/fs/cgroup/sbx-tests || exit 1
echo "+memory +pids +cpu" >/sys/fs/cgroup/sbx-tests/cgroup.subtree_control || exit 1
export SBX_DAEMON_CGROUPS=/sys/fs/cgroup/sbx-tests
rc=0
for t in ${SBX_VM_TESTS:-tests/vm/test_cgroup_v2.py tests/integration/test_session_cgroups.py \
                            tests/integration/test_outcomes.py}; do
  echo "vm: == $t"
  start=$(date +%s)
  python3 "$SBX_SRC/$t" || rc=1
  echo "vm: == $t took $(($(date +%s) - start)) s"
done
exit $rc
