//go:build linux

package mounter

func (m *linuxMounter) Platform() Platform { return LinuxPlatform }
