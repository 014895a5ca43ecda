package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// The etcd client is made in the background. With a user, etcd's client
// logs in while it is created and gives up after the dial timeout, so
// making it in Open would make a replica that starts during an etcd outage
// exit instead of waiting not-ready, as it does without a user. connect
// retries until the client exists; until then every operation answers as
// if etcd were unreachable and Health says why.

// ErrAuthFailed marks a login etcd refused (wrong user or password). It is
// retried (the password file is read again each time, so a corrected
// secret is picked up) but logged at error on every attempt, never silently.
var ErrAuthFailed = errors.New("etcd authentication failed")

// Connect backoff: the first pause is Options.RetryDelay, doubling up to
// these caps. A refused login is not going to change by itself, so it is
// retried (and logged) far less often than an unreachable cluster. The
// first login may take Options.DialTimeout; each failed attempt other
// than a refusal (a timed-out login among them) gives the next twice as
// long, up to loginTimeoutMax, so a slow etcd (password checks are bcrypt)
// is waited for rather than given up on every time.
const (
	connectRetryMax     = 2 * time.Second
	authFailureRetryMax = 30 * time.Second
	loginTimeoutMax     = 16 * time.Second
)

// connect makes the client, retrying with backoff until it succeeds or the
// backend closes, then starts the health probe.
func (b *Backend) connect() {
	defer b.wg.Done()
	delay, loginTimeout := b.opts.RetryDelay, b.opts.DialTimeout
	for attempt := 1; ; attempt++ {
		cli, err := b.newClient(loginTimeout)
		if b.done.Err() != nil {
			if cli != nil {
				_ = cli.Close()
			}
			return
		}
		if err == nil {
			b.conn.Store(cli)
			close(b.connected)
			b.log.WithField("attempts", attempt).Info("etcd client connected")
			b.wg.Add(1)
			go b.probe(b.done)
			return
		}
		b.setHealth(err)
		maxDelay := connectRetryMax
		l := b.log.WithField("attempt", attempt).WithError(err)
		if errors.Is(err, ErrAuthFailed) {
			maxDelay = authFailureRetryMax
			l.Error("etcd refused the login: not ready until the user or password file is corrected (retrying)")
		} else {
			loginTimeout = min(2*loginTimeout, max(loginTimeoutMax, b.opts.DialTimeout))
			if attempt == 1 {
				l.Warn("etcd not reachable yet: not ready, connecting in the background")
			}
		}
		select {
		case <-b.done.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxDelay)
	}
}

// newClient makes one client and, with a user, logs it in within
// loginTimeout. Its errors never contain the password.
func (b *Backend) newClient(loginTimeout time.Duration) (*clientv3.Client, error) {
	o := b.opts
	pw, err := o.password()
	if err != nil {
		return nil, fmt.Errorf("etcd: %w", err)
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:            o.Endpoints,
		DialTimeout:          loginTimeout, // with the dial itself non-blocking, it bounds only the login
		DialKeepAliveTime:    2 * time.Second,
		DialKeepAliveTimeout: 2 * time.Second,
		TLS:                  b.tls,
		Username:             o.Username,
		Password:             pw,
		Context:              b.done,       // Close ends a login in progress
		Logger:               zap.NewNop(), // failures surface through our own log lines and metrics
	})
	switch {
	case err == nil:
		return cli, nil
	case errors.Is(err, rpctypes.ErrAuthFailed):
		return nil, fmt.Errorf("%w for user %q at %s: %w", ErrAuthFailed, o.Username, strings.Join(o.Endpoints, ","), err)
	case o.Username != "":
		return nil, fmt.Errorf("%w: logging in as %q at %s: %w", errNotYetReached, o.Username, strings.Join(o.Endpoints, ","), err)
	default:
		return nil, fmt.Errorf("%w: client for %s: %w", errNotYetReached, strings.Join(o.Endpoints, ","), err)
	}
}

// client returns the etcd client, waiting for it until ctx ends. A refused
// login answers at once: waiting would not change it.
func (b *Backend) client(ctx context.Context) (*clientv3.Client, error) {
	if cli := b.conn.Load(); cli != nil {
		return cli, nil
	}
	if err := b.Health(); errors.Is(err, ErrAuthFailed) {
		return nil, err
	}
	cli, err := b.waitClient(ctx)
	if err != nil && errors.Is(err, ctx.Err()) {
		return nil, fmt.Errorf("%w (%w)", b.Health(), err)
	}
	return cli, err
}

// waitClient is client for background loops: it waits through refused
// logins too (connect retries them) until the client exists, ctx ends or
// the backend closes.
func (b *Backend) waitClient(ctx context.Context) (*clientv3.Client, error) {
	select {
	case <-b.connected:
		return b.conn.Load(), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-b.done.Done():
		return nil, errClosed
	}
}

var errClosed = errors.New("etcdstore: closed")

// Client is what readers of the registry need from etcd (the replica and
// engine listings, the selector's watch). *clientv3.Client is one;
// Backend.Client returns one that waits for the backend's connection.
type Client interface {
	Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error)
	Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan
}

// backendClient is the Backend as a Client: each call waits (within its
// context) for the connection, as calls on an etcd client not connected yet
// do.
type backendClient struct{ b *Backend }

func (c backendClient) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	cli, err := c.b.client(ctx)
	if err != nil {
		return nil, err
	}
	return cli.Get(ctx, key, opts...)
}

// Watch starts the watch once connected; the channel closes without an
// event if ctx ends (or the backend closes) first, as a broken watch does.
func (c backendClient) Watch(ctx context.Context, key string, opts ...clientv3.OpOption) clientv3.WatchChan {
	if cli := c.b.conn.Load(); cli != nil {
		return cli.Watch(ctx, key, opts...)
	}
	out := make(chan clientv3.WatchResponse)
	go func() {
		defer close(out)
		cli, err := c.b.waitClient(ctx)
		if err != nil {
			return
		}
		for resp := range cli.Watch(ctx, key, opts...) {
			select {
			case out <- resp:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}
