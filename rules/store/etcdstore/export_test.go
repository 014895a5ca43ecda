package etcdstore

// KillClient closes b's etcd connection without revoking anything, as a
// crashed process would leave it.
func KillClient(b *Backend) {
	if cli := b.conn.Load(); cli != nil {
		_ = cli.Close()
	}
}
