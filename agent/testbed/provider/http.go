package provider

import (
	"fmt"
	"net"
	"net/http"
)

// serveHTTP answers every request with greeting and the client's address,
// logging each one as a TCP hit.
func serveHTTP(l net.Listener, greeting string, log *eventLog) {
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		log.add(Event{Kind: EvTCP, Net: "tcp", Src: r.RemoteAddr, Dst: l.Addr().String(), Msg: "http " + r.Method + " " + r.URL.Path})
		fmt.Fprintf(w, "%s (you are %s)\n", greeting, r.RemoteAddr)
	})}
	if err := srv.Serve(l); err != nil && !isClosed(err) {
		log.errorf("http serve: %v", err)
	}
}
