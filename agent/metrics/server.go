package metrics

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/vpn-confinement/vpn-confinement/agent/config"
)

// Handler serves /metrics, /healthz and /readyz from m's snapshot.
func (m *Metrics) Handler(log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.Registry(), promhttp.HandlerOpts{
		ErrorLog:            slogPrinter{log},
		Timeout:             10 * time.Second,
		MaxRequestsInFlight: 4,
	}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		code, body := m.Healthz()
		text(w, code, body)
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if m.Snapshot().Ready {
			text(w, http.StatusOK, "ready\n")
			return
		}
		text(w, http.StatusServiceUnavailable, "namespace "+m.name+" is not up yet\n")
	})
	return mux
}

// Healthz is /healthz's answer: 200 "ok" when the latest check found
// nothing wrong, else 503 with its problems, one a line (the problems
// `vpn-agent status` shows).
func (m *Metrics) Healthz() (int, string) {
	s := m.Snapshot()
	switch {
	case s.Report == nil:
		return http.StatusServiceUnavailable, "no health check of namespace " + m.name + " yet\n"
	case s.Report.Healthy():
		return http.StatusOK, "ok\n"
	}
	var b strings.Builder
	for _, p := range s.Report.Strings() {
		b.WriteString(strings.ReplaceAll(p, "\n", " "))
		b.WriteByte('\n')
	}
	return http.StatusServiceUnavailable, b.String()
}

func text(w http.ResponseWriter, code int, body string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	fmt.Fprint(w, body)
}

type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) {
	p.log.Warn("metrics: " + strings.TrimSpace(fmt.Sprintln(v...)))
}

// Server is the HTTP server on metrics.listen.
type Server struct {
	srv  *http.Server
	ln   net.Listener
	l    *config.Listen
	done chan struct{}
	log  *slog.Logger
}

// Timeouts of the metrics server: short, so that a connection that
// sends nothing, or idles between scrapes, gives its slot (MaxConns)
// back within seconds.
const (
	readHeaderTimeout = 3 * time.Second
	idleTimeout       = 5 * time.Second
)

// Listen opens l (in the calling thread's network namespace: the host's
// for the agent) and serves h on it, at most MaxConns connections at
// once. A unix socket's directories must be root's alone
// (config.CheckSocketDir); its stale file (a socket nobody answers on)
// is removed first; it is created mode 0660 and removed by Close.
// Failing to listen is a *config.FieldError naming metrics.listen.
func Listen(l *config.Listen, h http.Handler, log *slog.Logger) (*Server, error) {
	ln, err := listen(l)
	if err != nil {
		return nil, err
	}
	return serve(l, limit(ln, MaxConns), h, log), nil
}

// serve serves h on ln (Listen's bound already applied, or not: tests).
func serve(l *config.Listen, ln net.Listener, h http.Handler, log *slog.Logger) *Server {
	if log == nil {
		log = slog.Default()
	}
	s := &Server{
		srv: &http.Server{
			Handler:           h,
			ReadHeaderTimeout: readHeaderTimeout,
			ReadTimeout:       5 * time.Second,
			WriteTimeout:      15 * time.Second,
			IdleTimeout:       idleTimeout,
			MaxHeaderBytes:    16 << 10,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		},
		ln: ln, l: l, done: make(chan struct{}), log: log,
	}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "listen", l.String(), "err", err)
		}
	}()
	log.Info("serving metrics", "listen", l.String(), "maxConnections", MaxConns)
	if w := l.Exposed(); w != "" {
		log.Warn(w)
	}
	return s
}

// Addr is the address listened on (a tcp port 0 resolved).
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

func listen(l *config.Listen) (net.Listener, error) {
	switch l.Network {
	case "tcp":
		ln, err := net.Listen("tcp", l.Address)
		if err != nil {
			return nil, listenErr(l, err)
		}
		return ln, nil
	case "unix":
		if err := config.CheckSocketDir("metrics.listen", filepath.Dir(l.Address)); err != nil {
			return nil, err
		}
		ln, err := listenUnix(l.Address)
		if err != nil {
			var fe *config.FieldError
			if errors.As(err, &fe) {
				return nil, err
			}
			return nil, listenErr(l, err)
		}
		ln.SetUnlinkOnClose(true)
		return ln, nil
	}
	return nil, &config.FieldError{Field: "metrics.listen", Msg: fmt.Sprintf("unknown network %q", l.Network)}
}

// listenErr is a failed listen on l, as a FieldError naming the field.
func listenErr(l *config.Listen, err error) error {
	fix := "choose a free address, or stop what listens there"
	if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
		fix = "choose an address the agent may bind"
	}
	return &config.FieldError{Field: "metrics.listen", Msg: fmt.Sprintf("cannot listen on %s: %v", l, cause(err)), Fix: fix}
}

// cause is err's innermost errno ("address already in use"), else err.
func cause(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

// removeStale removes a socket file at path that no one answers on. Any
// other file (a symbolic link too: it is not followed) is left alone (an
// error), as is a live socket (then the listen fails: address in use).
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return fmt.Errorf("%s exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return nil // live: let listen report it in use
	}
	return os.Remove(path)
}

// Close stops the server (in-flight requests get up to 2s) and removes
// a unix socket.
func (s *Server) Close() error {
	if s == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		s.srv.Close()
	}
	<-s.done
	if s.l.Network == "unix" {
		// SetUnlinkOnClose removed it; a leftover (a failed close) goes too.
		if err := os.Remove(s.l.Address); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("cannot remove metrics socket", "path", s.l.Address, "err", err)
		}
	}
	return err
}
