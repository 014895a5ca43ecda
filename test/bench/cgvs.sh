# Sourced by the callgrind bench scripts (irpr.sh, irsse.sh): one
# definition of how a target's instruction count is set beside nginx's and
# the baseline's.

# cg_vs SUMS TARGET prints TARGET's ratios from the associative array
# named SUMS (per-target sums over the rounds): "  N.NNx nginx" when nginx
# ran, and for the baseline "  (infergate/baseline N.NNNx)".
cg_vs() {
  local -n sums=$1
  local t=$2
  [[ -n ${sums[nginx]:-} ]] && awk -v a="${sums[$t]}" -v b="${sums[nginx]}" 'BEGIN{printf "  %.2fx nginx", a/b}'
  [[ -n ${sums[infergate]:-} && $t == baseline ]] && awk -v a="${sums[infergate]}" -v b="${sums[baseline]}" 'BEGIN{printf "  (infergate/baseline %.3fx)", a/b}'
  return 0
}
