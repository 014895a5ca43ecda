package daemon

import (
	"context"

	"github.com/infergate/infergate/api"
	"github.com/infergate/infergate/rules/store/etcdstore"
)

// replicaLister answers GET …/replicas from the shared etcd store, so
// `infergate get replicas --server …` needs no etcd credentials on the
// operator's machine.
type replicaLister struct{ b *etcdstore.Backend }

func (l replicaLister) Replicas(ctx context.Context) (api.ReplicaList, error) {
	reps, rev, err := etcdstore.Replicas(ctx, l.b.Client(), l.b.Prefix())
	if err != nil {
		return api.ReplicaList{}, err
	}
	out := api.ReplicaList{Revision: rev, Replicas: make([]api.ReplicaView, len(reps))}
	for i, r := range reps {
		out.Replicas[i] = api.ReplicaView{ID: r.ID, API: r.API, Revision: r.Revision, Rules: r.Rules, Digest: r.Digest, Updated: r.Updated}
	}
	return out, nil
}
