// simple-peer imports these three from 'webrtc-polyfill'; @roamhq/wrtc provides them.
import wrtc from '@roamhq/wrtc'

export const RTCPeerConnection = wrtc.RTCPeerConnection
export const RTCSessionDescription = wrtc.RTCSessionDescription
export const RTCIceCandidate = wrtc.RTCIceCandidate
export default wrtc
