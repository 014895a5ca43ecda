package rules

import (
	"fmt"
	"net/netip"

	"github.com/infergate/infergate/apierror"
	"github.com/infergate/infergate/spec"
)

// servedKeys are the route keys a rule answers on: its own key and the same
// key on each secondary VIP (issue 12). Two rules must never share one, or a
// request could not tell which rule it is for.
func servedKeys(r *spec.Rule) []spec.Key {
	out := []spec.Key{r.Key}
	for _, a := range r.SecondaryVIPs {
		k := r.Key
		k.VIP = a
		out = append(out, k)
	}
	return out
}

// checkVIPCollisions refuses next when one of its addresses, with its route,
// is served by another stored rule — the collision rule externalIP already
// obeys (one key, one rule), extended to secondary VIPs.
func checkVIPCollisions(entries []Entry, next *spec.Rule) error {
	mine := servedKeys(next)
	for _, e := range entries {
		if e.Compiled == nil || e.Compiled.Key == next.Key {
			continue
		}
		for _, theirs := range servedKeys(e.Compiled) {
			for i, k := range mine {
				if k != theirs {
					continue
				}
				field := saPath(fieldExternalIP)
				if i > 0 {
					field = fmt.Sprintf("%s[%d].%s", fieldSecondaryVIPs, i-1, fieldAddress)
				}
				msg := fmt.Sprintf("%s is already served by rule %s", netip.AddrPortFrom(k.VIP, k.Port), e.Compiled.Key)
				return apierror.Conflict(apierror.CodeVIPConflict, field, msg, msg)
			}
		}
	}
	return nil
}
