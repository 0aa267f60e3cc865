package main

// defaultEndpoint is where the plugin serves CSI unless --endpoint says
// otherwise; on Windows a unix socket path has a drive letter.
const defaultEndpoint = "unix://C:/csi/csi.sock"
