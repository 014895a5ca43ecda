package pd

import (
	"testing"

	"github.com/infergate/infergate/datapath/pd/bufpool"
	"github.com/infergate/infergate/spec"
)

// TestDialectBuffers: every dialect takes its leg bodies from the pool it
// is given (the datapath's one pool, shared by all rules); given none, it
// gets a pool of its own, so standalone use still recycles them.
func TestDialectBuffers(t *testing.T) {
	shared := bufpool.New(bufpool.DefaultOptions())
	bufs := func(d Dialect) *bufpool.Pool {
		switch d := d.(type) {
		case *vllm:
			return d.opts.Buffers
		case *sglang:
			return d.opts.Buffers
		case *trtllm:
			return d.opts.Buffers
		}
		t.Fatalf("unknown dialect %T", d)
		return nil
	}
	for _, e := range []spec.Engine{spec.EngineVLLM, spec.EngineSGLang, spec.EngineTRTLLM} {
		d, ok := New(e, Options{Buffers: shared})
		if !ok || bufs(d) != shared {
			t.Errorf("%s: given the shared pool, uses %p", e, bufs(d))
		}
		a, _ := New(e, Options{})
		b, _ := New(e, Options{})
		if bufs(a) == nil || bufs(a) == shared || bufs(a) == bufs(b) {
			t.Errorf("%s: without a pool, got %p and %p (shared %p): want one of its own each", e, bufs(a), bufs(b), shared)
		}
	}
}
