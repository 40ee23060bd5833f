package rmqbroker;

import java.io.IOException;
import java.lang.reflect.Field;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import org.apache.rocketmq.store.DefaultMessageStore;
import org.apache.rocketmq.store.ha.DefaultHAService;

/**
 * RocketMQ's {@link DefaultHAService} with its slave-accepting socket bound to 127.0.0.1: the
 * stock one binds {@code new InetSocketAddress(haListenPort)}, every interface. Loaded by the
 * store through {@code META-INF/service/org.apache.rocketmq.store.ha.HAService}
 * (ServiceProvider); the address is the only change.
 */
public class LoopbackHAService extends DefaultHAService {
    @Override
    public void init(DefaultMessageStore store) throws IOException {
        super.init(store);
        try {
            Class<?> accept = acceptSocketService.getClass().getSuperclass();
            Field listen = accept.getDeclaredField("socketAddressListen");
            listen.setAccessible(true);
            listen.set(acceptSocketService, new InetSocketAddress(InetAddress.getLoopbackAddress(),
                store.getMessageStoreConfig().getHaListenPort()));
        } catch (ReflectiveOperationException e) {
            throw new IOException("cannot bind the HA socket to the loopback address", e);
        }
    }
}
