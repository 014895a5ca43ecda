package epp

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
)

// gRPC health service names. Liveness answers while the process serves;
// readiness and the ext_proc service answer SERVING once the owner calls
// SetReady(true) (rules loaded, endpoints known).
const (
	HealthLiveness  = "liveness"
	HealthReadiness = "readiness"
	HealthExtProc   = "envoy.service.ext_proc.v3.ExternalProcessor"
)

// Server is the endpoint picker: the ext_proc service on one listener and the
// gRPC health service on another.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	opts     Options
	picker   Picker
	progress Progress // picker when it implements Progress, else nil
	metrics  *Metrics
	health   *health.Server

	// The process-wide bounds every stream shares (Options.BodyBudgetBytes,
	// Options.MaxStreams).
	bodies  budget
	streams budget
}

// New builds a server. m may be nil (metrics kept but not registered).
func New(opts Options, p Picker, m *Metrics) (*Server, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if p == nil {
		return nil, errors.New("epp: a picker is required")
	}
	if m == nil {
		m = NewMetrics(nil)
	}
	h := health.NewServer()
	h.SetServingStatus(HealthLiveness, healthpb.HealthCheckResponse_SERVING)
	h.SetServingStatus(HealthReadiness, healthpb.HealthCheckResponse_NOT_SERVING)
	h.SetServingStatus(HealthExtProc, healthpb.HealthCheckResponse_NOT_SERVING)
	progress, _ := p.(Progress)
	s := &Server{opts: opts, picker: p, progress: progress, metrics: m, health: h}
	s.bodies.limit, s.streams.limit = opts.BodyBudgetBytes, int64(opts.MaxStreams)
	return s, nil
}

// Options returns the options the server runs with.
func (s *Server) Options() Options { return s.opts }

// SetReady flips readiness (and the ext_proc service's health) so a gateway
// stops sending to an EPP that cannot pick yet.
func (s *Server) SetReady(ready bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if ready {
		st = healthpb.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus(HealthReadiness, st)
	s.health.SetServingStatus(HealthExtProc, st)
}

// Register adds the ext_proc service to g, for callers that run their own
// gRPC server. g must be built with ServerCodec(): the answers are encoded
// by hand and only that codec sends them.
func (s *Server) Register(g *grpc.Server) { extprocv3.RegisterExternalProcessorServer(g, s) }

// ServerCodec is the gRPC server option the ext_proc service needs: the
// codec that sends the streams' hand-encoded answers as they are and
// decodes a proxy's usual messages without the proto package's reflection.
func ServerCodec() grpc.ServerOption { return grpc.ForceServerCodecV2(newCodec()) }

// RegisterHealth adds the health service to g.
func (s *Server) RegisterHealth(g *grpc.Server) { healthpb.RegisterHealthServer(g, s.health) }

// Run listens on Options.Addr and Options.HealthAddr and serves until ctx
// ends.
func (s *Server) Run(ctx context.Context) error {
	lis, err := net.Listen("tcp", s.opts.Addr)
	if err != nil {
		return fmt.Errorf("epp: listen %s: %w", s.opts.Addr, err)
	}
	hlis, err := net.Listen("tcp", s.opts.HealthAddr)
	if err != nil {
		lis.Close()
		return fmt.Errorf("epp: listen health %s: %w", s.opts.HealthAddr, err)
	}
	return s.Serve(ctx, lis, hlis)
}

// maxRecvMsgSize lets one message carry a whole body of up to
// maxBody bytes plus its framing: a proxy may send a body in one chunk, and
// the EPP's answer to a body past its cap is a 413, not gRPC's
// ResourceExhausted at its 4 MiB default (never lowered below that, so
// large header maps still fit). gRPC reads a message as its frames arrive,
// so the cap allocates nothing up front.
func maxRecvMsgSize(maxBody int64) int {
	return int(max(min(maxBody, math.MaxInt32-1<<20)+1<<20, 4<<20))
}

// Serve serves ext_proc on lis and health on hlis until ctx ends or either
// server fails, then drains: health turns NOT_SERVING first so the gateway
// stops routing here, open streams get DrainTimeout to finish, and both
// servers are stopped. It returns once every goroutine it started is gone.
func (s *Server) Serve(ctx context.Context, lis, hlis net.Listener) error {
	// Proxies hold ext_proc connections for a long time and may ping them to
	// keep them alive; grpc-go's default policy would answer frequent pings
	// with GOAWAY.
	g := grpc.NewServer(append(s.opts.Transport.serverOptions(),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: 10 * time.Second, PermitWithoutStream: true,
		}), grpc.NumStreamWorkers(uint32(s.opts.StreamWorkers)),
		grpc.MaxRecvMsgSize(maxRecvMsgSize(s.opts.MaxBodyBytes)),
		ServerCodec())...)
	s.Register(g)
	hg := grpc.NewServer()
	s.RegisterHealth(hg)

	errc := make(chan error, 2)
	go func() { errc <- serveErr("ext_proc", g.Serve(lis)) }()
	go func() { errc <- serveErr("health", hg.Serve(hlis)) }()

	var first error
	pending := 2
	select {
	case <-ctx.Done():
	case first = <-errc:
		pending--
	}
	s.health.Shutdown()
	drain(g, s.opts.DrainTimeout)
	hg.Stop()
	for ; pending > 0; pending-- {
		if err := <-errc; first == nil {
			first = err
		}
	}
	return first
}

func serveErr(what string, err error) error {
	if err == nil || errors.Is(err, grpc.ErrServerStopped) {
		return nil
	}
	return fmt.Errorf("epp: serve %s: %w", what, err)
}

// drain stops g gracefully, cutting the streams still open after d.
func drain(g *grpc.Server, d time.Duration) {
	done := make(chan struct{})
	go func() {
		g.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		g.Stop()
		<-done
	}
}
