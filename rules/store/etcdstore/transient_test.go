package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestTransient: the errors after which Commit asks again (and sorts out
// an ambiguous first attempt) are the ones a member's death or a leader
// election produces, in the form the client hands them back; a deadline,
// a cancel or a refusal is not retried.
func TestTransient(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"request timed out, as the client returns it", clientv3.ContextError(ctx, rpctypes.ErrGRPCTimeout), true},
		{"timed out, connection lost", clientv3.ContextError(ctx, rpctypes.ErrGRPCTimeoutDueToConnectionLost), true},
		{"timed out, leader failed", clientv3.ContextError(ctx, rpctypes.ErrGRPCTimeoutDueToLeaderFail), true},
		{"leader changed", clientv3.ContextError(ctx, rpctypes.ErrGRPCLeaderChanged), true},
		{"no leader", clientv3.ContextError(ctx, rpctypes.ErrGRPCNoLeader), true},
		{"transport unavailable", status.Error(codes.Unavailable, "connection refused"), true},
		{"wrapped", fmt.Errorf("commit: %w", clientv3.ContextError(ctx, rpctypes.ErrGRPCTimeout)), true},
		{"deadline", context.DeadlineExceeded, false},
		{"cancelled", context.Canceled, false},
		{"too many ops", clientv3.ContextError(ctx, rpctypes.ErrGRPCTooManyOps), false},
		{"auth", clientv3.ContextError(ctx, rpctypes.ErrGRPCAuthFailed), false},
		{"other", errors.New("disk full"), false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("%s (%v): transient %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
