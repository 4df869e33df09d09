// Package natsauth is the platform's NATS authorization: who may connect,
// and what each identity may publish and subscribe to.
//
// NATS authenticates a client by its TLS certificate (verify_and_map): the
// user is the certificate's SPIFFE URI SAN, the same identity package hop
// checks on the gRPC hops (spiffe://cellpay.internal/cell/cell-a, ...). A
// client without a certificate of the platform's CA fails the handshake;
// one whose identity is not a user here is refused at CONNECT. There is no
// anonymous user and no password.
//
// Each identity gets what its code uses, and nothing else:
//
//	cell <id>   reads reference data through its own durable consumer
//	            (cell-<id>), publishes its own status subject only, reads
//	            the GTR's KV bucket (partners' callback settings), and
//	            uses the transaction directory's bucket: any entry, and
//	            its own signing certificates only
//	gtr         uses its KV bucket (routing table, partners), writes the
//	            directory's release records (never an entry), publishes
//	            and reads the audit stream (and may create it, never
//	            update, purge or delete it: AuditStreamConfig), and reads
//	            every cell's status subject
//	replicator  publishes reference data and reads the cells' status
//	nats-admin  everything: a local platform's launcher and tests only
//
// Replies come to an inbox prefix of the identity's own (InboxPrefix), so
// that no client can read another's replies. The permissions are written
// against the platform's default stream and bucket names; a component
// started with other names is refused by NATS, loudly.
package natsauth

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/cellpay/cellpay/internal/hop"
)

// The streams, buckets and subjects the permissions name: the defaults of
// kvsync, the cell's directory and the GTR's audit log are these; refdata's
// are repeated here, and TestNamesMatch holds them equal.
const (
	RefdataStream  = "CELLPAY_REFDATA"
	RefdataSubject = "cellpay.refdata.versions"
	StatusPrefix   = "cellpay.refdata.status."
	GTRBucket      = "cellpay_gtr"
	// DrillsBucket keeps the drills' signed reports (Admin.RecordDrill).
	DrillsBucket       = "cellpay_drills"
	DirectoryBucket    = "cellpay_txn"
	AuditStream        = "CELLPAY_AUDIT"
	AuditSubjectPrefix = "cellpay.audit."
	// ReplicasPrefix: the GTR replicas' questions to one another
	// (cellpay.gtr.ask.<kind>, package replicas).
	ReplicasPrefix = "cellpay.gtr.ask."
)

// DirectoryEntries are the directory bucket's entry subjects (keys "t.",
// package directory); DirectoryCerts(id) are cell id's certificates'
// (keys "c.<id>.").
const DirectoryEntries = "$KV." + DirectoryBucket + ".t.>"

// DirectoryCerts are the subjects of cell id's signing certificates in the
// directory bucket.
func DirectoryCerts(id string) string { return "$KV." + DirectoryBucket + ".c." + id + ".>" }

// DirectoryReleases are the subjects of the records declaring cells lost
// (keys DirectoryReleaseKey): the GTR's alone.
const DirectoryReleases = "$KV." + DirectoryBucket + ".r.>"

// DirectoryReleaseKey is the directory bucket's key of the record
// declaring cell lost for good (gtrctl release).
func DirectoryReleaseKey(cell string) string { return "r." + cell }

// AuditMaxBytes bounds the audit stream on each server.
const AuditMaxBytes = 1 << 30

// User is one identity's permissions: the subjects it may publish to and
// subscribe to (NATS wildcards).
type User struct {
	Identity  string
	Publish   []string
	Subscribe []string
}

// InboxPrefix is the reply inbox prefix of identity: _INBOX.<last path
// segments of the identity>, e.g. _INBOX.cell.cell-a, _INBOX.gtr.
func InboxPrefix(identity string) string {
	path := strings.TrimPrefix(identity, "spiffe://"+hop.Domain+"/")
	return "_INBOX." + strings.ReplaceAll(path, "/", ".")
}

// jsAPI is the JetStream API.
const jsAPI = "$JS.API."

// readStream lets a client read stream: look it up, get messages, and
// read through consumers named consumer ("*" for any; KV watches make
// ephemeral ones), acknowledging and answering flow control.
func readStream(stream, consumer string) []string {
	c := "." + consumer
	return []string{
		jsAPI + "STREAM.INFO." + stream,
		jsAPI + "STREAM.MSG.GET." + stream,
		jsAPI + "DIRECT.GET." + stream,
		jsAPI + "DIRECT.GET." + stream + ".>",
		jsAPI + "CONSUMER.CREATE." + stream + c,
		jsAPI + "CONSUMER.CREATE." + stream + c + ".>",
		jsAPI + "CONSUMER.DURABLE.CREATE." + stream + c,
		jsAPI + "CONSUMER.INFO." + stream + c,
		jsAPI + "CONSUMER.DELETE." + stream + c,
		jsAPI + "CONSUMER.MSG.NEXT." + stream + c,
		"$JS.ACK." + stream + c + ".>",
		"$JS.FC." + stream + ".>",
	}
}

// ownStream adds making stream where it does not exist (never changing,
// purging or deleting it: its limits are the NATS administrator's once it
// exists, package jsconf) to readStream(stream, "*"), and publishing to
// subjects.
func ownStream(stream string, subjects ...string) []string {
	p := append(readStream(stream, "*"),
		jsAPI+"STREAM.CREATE."+stream,
		// Ephemeral consumers (ordered consumers, KV watches) are
		// created with the stream-only subject by some clients.
		jsAPI+"CONSUMER.CREATE."+stream)
	return append(p, subjects...)
}

// kv is the stream behind key-value bucket b, and its subjects.
func kv(b string) (stream, subjects string) { return "KV_" + b, "$KV." + b + ".>" }

// Cell is the user of cell id.
func Cell(id string) User {
	identity := hop.Cell(id)
	gtrStream, _ := kv(GTRBucket)
	dirStream, _ := kv(DirectoryBucket)
	pub := []string{jsAPI + "INFO", StatusPrefix + id}
	// Its own reference data consumer only, and the stream's creation
	// (with the code's configuration) so that a cell may start before
	// the replicator has published; never an update, purge or delete.
	pub = append(pub, readStream(RefdataStream, "cell-"+id)...)
	pub = append(pub, jsAPI+"STREAM.CREATE."+RefdataStream)
	// The partners' callback settings: read-only.
	pub = append(pub, readStream(gtrStream, "*")...)
	pub = append(pub, jsAPI+"CONSUMER.CREATE."+gtrStream)
	// The directory: any transaction's entry (a cell may claim any new
	// one; readers judge every change by its owner's signature), and its
	// own certificates only, so that no cell puts a certificate where
	// readers look for another's.
	pub = append(pub, ownStream(dirStream, DirectoryEntries, DirectoryCerts(id))...)
	return User{Identity: identity, Publish: dedupe(pub), Subscribe: []string{InboxPrefix(identity) + ".>"}}
}

// AuditStreamConfig is the CELLPAY_AUDIT stream's configuration with
// replicas replicas. A local platform's launcher creates it with its NATS
// administrator before any GTR starts; a GTR creates it only where nobody
// did (a Kubernetes platform's first replica). The GTR's user may create
// the stream but never update it: NATS refuses a create whose
// configuration differs from the existing stream's, so a GTR cannot
// shrink its own audit log's limits, purge or delete it; and the stream
// itself refuses the deletion of a record and a purge (DenyDelete,
// DenyPurge), to anyone.
//
// The stream keeps every record (no age limit) up to AuditMaxBytes; past
// it, new records are refused (never the oldest dropped), so the GTR
// keeps them in its spool and an alert on the stream's fill says so.
func AuditStreamConfig(replicas int) jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name: AuditStream, Subjects: []string{AuditSubjectPrefix + ">"}, Storage: jetstream.FileStorage,
		Replicas: max(replicas, 1), Duplicates: 10 * time.Minute,
		MaxBytes: AuditMaxBytes, Discard: jetstream.DiscardNew,
		// No record is deleted or purged through the stream's API, by
		// whoever asks, NATS administrators included.
		DenyDelete: true, DenyPurge: true,
		Description: "GTR admin API audit log: one record per admin change, refused call or failed login",
	}
}

// GTR is the user of every GTR replica.
func GTR() User {
	gtrStream, gtrSubjects := kv(GTRBucket)
	pub := []string{jsAPI + "INFO"}
	pub = append(pub, ownStream(gtrStream, gtrSubjects)...)
	// The drills' signed reports: a bucket of its own.
	drillsStream, drillsSubjects := kv(DrillsBucket)
	pub = append(pub, ownStream(drillsStream, drillsSubjects)...)
	// The directory: only its release records (gtrctl release),
	// never an entry.
	dirStream, _ := kv(DirectoryBucket)
	pub = append(pub, jsAPI+"STREAM.INFO."+dirStream, DirectoryReleases)
	// The audit stream: read, publish, create if missing; no update.
	pub = append(pub, readStream(AuditStream, "*")...)
	pub = append(pub, jsAPI+"STREAM.CREATE."+AuditStream, jsAPI+"CONSUMER.CREATE."+AuditStream, AuditSubjectPrefix+">")
	// The replicas' questions to one another, and their answers, which
	// go to the asking replica's inbox (every replica's is the GTR's).
	pub = append(pub, ReplicasPrefix+">", InboxPrefix(hop.GTR)+".>")
	return User{Identity: hop.GTR, Publish: dedupe(pub),
		Subscribe: []string{InboxPrefix(hop.GTR) + ".>", StatusPrefix + "*", ReplicasPrefix + ">"}}
}

// Replicator is the reference data publisher's user.
func Replicator() User {
	pub := []string{jsAPI + "INFO"}
	pub = append(pub, ownStream(RefdataStream, RefdataSubject)...)
	return User{Identity: hop.Replicator, Publish: dedupe(pub),
		Subscribe: []string{InboxPrefix(hop.Replicator) + ".>", StatusPrefix + "*"}}
}

// Admin may do anything.
func Admin() User {
	return User{Identity: hop.NATSAdmin, Publish: []string{">"}, Subscribe: []string{">"}}
}

// Users are the users of a platform with these cells: the components'
// own, no administrator (a local platform adds Admin; a production one
// administers NATS through its own operator account).
func Users(cells []string) []User {
	u := []User{GTR(), Replicator()}
	for _, c := range cells {
		u = append(u, Cell(c))
	}
	return u
}

func dedupe(s []string) []string {
	out := make([]string, 0, len(s))
	for _, v := range s {
		if !slices.Contains(out, v) {
			out = append(out, v)
		}
	}
	return out
}

// Authorization renders users as a nats-server configuration block.
func Authorization(users []User) string {
	var b strings.Builder
	b.WriteString("authorization {\n  users = [\n")
	for _, u := range users {
		fmt.Fprintf(&b, "    {user: %s, permissions: {\n      publish: {allow: %s}\n      subscribe: {allow: %s}\n    }}\n",
			strconv.Quote(u.Identity), list(u.Publish), list(u.Subscribe))
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}

func list(s []string) string {
	q := make([]string, len(s))
	for i, v := range s {
		q[i] = strconv.Quote(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// Server is a nats-server configuration for a local platform: one server
// alone, or one member of a cluster (Routes set).
type Server struct {
	// Name is the server's name, unique in its cluster (JetStream's
	// placement and the Raft groups name servers by it).
	Name     string
	Host     string
	Port     int
	StoreDir string
	// Cert, Key: the server's certificate, which must serve both TLS
	// sides in a cluster (routes are mutual TLS with it); CA: the CA of
	// every client's and every other member's.
	Cert, Key, CA string
	Cells         []string
	// ClusterPort and Routes make the server a member of cluster
	// "cellpay": it takes routes on ClusterPort and dials every address
	// of Routes (host:port of each member's ClusterPort, its own
	// included, as nats-server allows). None: a server alone.
	ClusterPort int
	Routes      []string
	// MonitorPort, if set, serves nats-server's HTTP monitoring
	// endpoints (/varz, /jsz, /healthz) on 127.0.0.1 only, for natsmon.
	MonitorPort int
}

// Config renders s: JetStream, TLS that requires a client certificate of
// CA and maps its identity to a user, Users(s.Cells) and Admin; in a
// cluster, routes over mutual TLS with the same certificate.
func (s Server) Config() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by the platform launcher (package natsauth); rewritten at every start.\n")
	if s.Name != "" {
		fmt.Fprintf(&b, "server_name: %s\n", strconv.Quote(s.Name))
	}
	fmt.Fprintf(&b, "host: %s\nport: %d\n", strconv.Quote(s.Host), s.Port)
	if s.MonitorPort != 0 {
		fmt.Fprintf(&b, "http: %s\n", strconv.Quote("127.0.0.1:"+strconv.Itoa(s.MonitorPort)))
	}
	fmt.Fprintf(&b, "jetstream {\n  store_dir: %s\n}\n", strconv.Quote(s.StoreDir))
	tls := fmt.Sprintf("cert_file: %s\n  key_file: %s\n  ca_file: %s\n", strconv.Quote(s.Cert), strconv.Quote(s.Key), strconv.Quote(s.CA))
	fmt.Fprintf(&b, "tls {\n  %s  verify_and_map: true\n  timeout: 2\n}\n", tls)
	if len(s.Routes) > 0 {
		routes := make([]string, len(s.Routes))
		for i, r := range s.Routes {
			routes[i] = strconv.Quote("nats-route://" + r)
		}
		fmt.Fprintf(&b, "cluster {\n  name: cellpay\n  host: %s\n  port: %d\n  routes: [%s]\n  connect_retries: 120\n",
			strconv.Quote(s.Host), s.ClusterPort, strings.Join(routes, ", "))
		fmt.Fprintf(&b, "  tls {\n    %s    verify: true\n    timeout: 2\n  }\n}\n", strings.ReplaceAll(tls, "\n  ", "\n    "))
	}
	b.WriteString(Authorization(append(Users(s.Cells), Admin())))
	return b.String()
}
