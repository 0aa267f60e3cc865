package registration

// DefaultDir is the kubelet's plugin registration directory on a default
// Windows installation. The kubelet's plugin watcher uses unix domain
// sockets on Windows too (Windows 10 1803 and Windows Server 2019 have
// them).
const DefaultDir = `C:\var\lib\kubelet\plugins_registry`
