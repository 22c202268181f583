package policy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// GenWatch reads the nf_tables ruleset generation of one network
// namespace: a counter the kernel bumps at every committed nf_tables
// transaction in that namespace (any table, any process: nft, our Apply,
// SetForwarded), and never for packets (counter increments, ct state). Two
// reads that return the same generation of the same namespace therefore
// saw the same ruleset. It keeps one netlink socket open in the namespace,
// so that a read is one request; the socket pins the namespace it was
// opened in, so Read also reports which namespace answered (Ident), and a
// path that now names another namespace (deleted and made again) opens a
// new socket.
//
// A GenWatch is used by one goroutine at a time.
type GenWatch struct {
	path   string // the namespace file; "" is the calling thread's
	conn   *netlink.Conn
	ino    uint64 // of the namespace conn lives in
	dev    uint64
	cookie uint64
}

// Gen is one reading: the namespace (its inode, which the open socket
// keeps from being reused, the device of the namespace file system, and
// its SO_NETNS_COOKIE: unique for the boot, never reused, 0 where the
// kernel has none) and its ruleset generation.
type Gen struct {
	Ident  uint64
	Dev    uint64
	Cookie uint64
	ID     uint32
}

// NewGenWatch watches the namespace at nsPath; "" is the one the calling
// goroutine's thread is in: the agent's own, because a thread that enters
// another namespace (netns.Do) stays locked and never runs other
// goroutines again. Not /proc/self: that is the main thread's, and the
// runtime parks a main thread that ended locked inside another namespace.
// Nothing is opened until the first Read.
func NewGenWatch(nsPath string) *GenWatch { return &GenWatch{path: nsPath} }

// Read returns the namespace's current generation. On any error the
// socket is closed (the next Read opens a new one) and the caller must
// assume the ruleset changed.
func (w *GenWatch) Read() (Gen, error) {
	g, err := w.read()
	if err != nil {
		w.Close()
		return Gen{}, fmt.Errorf("nf_tables generation of %s: %w", nsName(w.path), err)
	}
	return g, nil
}

func (w *GenWatch) read() (Gen, error) {
	path := w.path
	if path == "" {
		runtime.LockOSThread() // thread-self names this thread only while locked
		defer runtime.UnlockOSThread()
		path = "/proc/thread-self/ns/net"
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return Gen{}, err
	}
	if w.conn != nil && st.Ino != w.ino {
		w.Close() // another namespace under the same name
	}
	if w.conn == nil {
		if err := w.open(path); err != nil {
			return Gen{}, err
		}
	}
	id, err := getGen(w.conn)
	if err != nil {
		return Gen{}, err
	}
	return Gen{Ident: w.ino, Dev: w.dev, Cookie: w.cookie, ID: id}, nil
}

// open dials a netfilter netlink socket inside the namespace at path and
// records the namespace's inode, read from the same file descriptor.
func (w *GenWatch) open(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return err
	}
	fd := int(f.Fd())
	if fd == 0 { // the library reads 0 as "no namespace"
		dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return err
		}
		defer unix.Close(dup)
		fd = dup
	}
	cfg := &netlink.Config{NetNS: fd}
	if ownNamespace(st) {
		cfg = nil // the caller's own: no setns (it needs CAP_SYS_ADMIN, which a sidecar has not)
	}
	c, err := netlink.Dial(unix.NETLINK_NETFILTER, cfg)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	w.conn, w.ino, w.dev, w.cookie = c, st.Ino, st.Dev, netnsCookie(c)
	return nil
}

// netnsCookie is the SO_NETNS_COOKIE of the namespace socket c lives in
// (Linux 5.14); 0 when the kernel cannot say.
func netnsCookie(c *netlink.Conn) uint64 {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0
	}
	var cookie uint64
	rc.Control(func(fd uintptr) {
		if v, err := unix.GetsockoptUint64(int(fd), unix.SOL_SOCKET, unix.SO_NETNS_COOKIE); err == nil {
			cookie = v
		}
	})
	return cookie
}

// Close closes the socket, if open.
func (w *GenWatch) Close() {
	if w.conn != nil {
		w.conn.Close()
		w.conn, w.ino, w.dev, w.cookie = nil, 0, 0, 0
	}
}

// The request google/nftables has no call for: NFT_MSG_GETGEN, answered
// by NFT_MSG_NEWGEN carrying NFTA_GEN_ID.
const (
	nftMsgNewGen = 15
	nftMsgGetGen = 16
	nftaGenID    = 1
	nfnlSubsysNF = 10 // NFNL_SUBSYS_NFTABLES
)

func getGen(c *netlink.Conn) (uint32, error) {
	req := netlink.Message{
		Header: netlink.Header{
			Type:  netlink.HeaderType(nfnlSubsysNF<<8 | nftMsgGetGen),
			Flags: netlink.Request,
		},
		// struct nfgenmsg: family AF_UNSPEC, version NFNETLINK_V0, res_id 0.
		Data: []byte{unix.AF_UNSPEC, unix.NFNETLINK_V0, 0, 0},
	}
	msgs, err := c.Execute(req)
	if err != nil {
		return 0, err
	}
	for _, m := range msgs {
		if m.Header.Type != netlink.HeaderType(nfnlSubsysNF<<8|nftMsgNewGen) || len(m.Data) < 4 {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return 0, err
		}
		ad.ByteOrder = binary.BigEndian
		for ad.Next() {
			if ad.Type() == nftaGenID {
				return ad.Uint32(), nil
			}
		}
		if err := ad.Err(); err != nil {
			return 0, err
		}
	}
	return 0, errors.New("no generation in the kernel's answer")
}

// Counters reads the named counters of the inet table name in the
// watched namespace, as the package's Counters does, over the socket the
// last Read used (one dump; no second socket entered into the namespace).
// Read first: without an open socket it is an error, and on any error the
// socket is closed.
func (w *GenWatch) Counters(name string) ([]CounterState, error) {
	if w.conn == nil {
		return nil, errors.New("counters: no generation read on this watch")
	}
	out, err := dumpCounters(w.conn, name)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("counters of table %s %q in %s: %w", FamilyINet, name, nsName(w.path), err)
	}
	slices.SortFunc(out, func(a, b CounterState) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Named objects: NFT_MSG_GETOBJ dumped for one table and type, answered
// by NFT_MSG_NEWOBJ with the counter's packets and bytes nested in
// NFTA_OBJ_DATA.
const (
	nftMsgNewObj       = 18
	nftMsgGetObj       = 19
	nftaObjTable       = 1
	nftaObjName        = 2
	nftaObjType        = 3
	nftaObjData        = 4
	nftObjectCounter   = 1
	nftaCounterBytes   = 1
	nftaCounterPackets = 2
)

func dumpCounters(c *netlink.Conn, table string) ([]CounterState, error) {
	ae := netlink.NewAttributeEncoder()
	ae.ByteOrder = binary.BigEndian
	ae.String(nftaObjTable, table)
	ae.Uint32(nftaObjType, nftObjectCounter)
	attrs, err := ae.Encode()
	if err != nil {
		return nil, err
	}
	msgs, err := c.Execute(netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(nfnlSubsysNF<<8 | nftMsgGetObj), Flags: netlink.Request | netlink.Dump},
		Data:   append([]byte{unix.NFPROTO_INET, unix.NFNETLINK_V0, 0, 0}, attrs...),
	})
	if err != nil {
		return nil, err
	}
	var out []CounterState
	for _, m := range msgs {
		if m.Header.Type != netlink.HeaderType(nfnlSubsysNF<<8|nftMsgNewObj) || len(m.Data) < 4 || m.Data[0] != unix.NFPROTO_INET {
			continue
		}
		ad, err := netlink.NewAttributeDecoder(m.Data[4:])
		if err != nil {
			return nil, err
		}
		ad.ByteOrder = binary.BigEndian
		var tbl string
		var typ uint32
		var cs CounterState
		for ad.Next() {
			switch ad.Type() {
			case nftaObjTable:
				tbl = ad.String()
			case nftaObjName:
				cs.Name = ad.String()
			case nftaObjType:
				typ = ad.Uint32()
			case nftaObjData:
				ad.Nested(func(nd *netlink.AttributeDecoder) error {
					for nd.Next() {
						switch nd.Type() {
						case nftaCounterBytes:
							cs.Bytes = nd.Uint64()
						case nftaCounterPackets:
							cs.Packets = nd.Uint64()
						}
					}
					return nil
				})
			}
		}
		if err := ad.Err(); err != nil {
			return nil, err
		}
		if tbl == table && typ == nftObjectCounter {
			out = append(out, cs)
		}
	}
	return out, nil
}
